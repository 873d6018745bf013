"""muflow on a GPU: the array module, the device's Gram operator and working-set home, and
prediction in blocks, all written over an array module (CuPy on a GPU, NumPy in CI).

- :mod:`muflow.device.arrays`: which module a ``device`` means, and the one-line error;
- :mod:`muflow.device.kernels`: the raw device kernels and their NumPy references;
- :mod:`muflow.device.rows`: :class:`DeviceRows`, K(X, X) computed on the device;
- :mod:`muflow.device.home`: :class:`DeviceHome`, the working-set loop's state there;
- :mod:`muflow.device.predict`: decision values computed there, a block of rows at a time.

Nothing here imports CuPy until a device is asked for, and importing this package loads
only :mod:`muflow.device.arrays` (a model on the CPU predicts without the rest).
"""

from muflow.device.arrays import DEVICES, array_module, check_device, to_host

__all__ = ["DEVICES", "array_module", "check_device", "to_host"]
