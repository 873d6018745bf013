"""muflow: kernel SVMs by multiplicative, coordinate and subset solvers, at scale."""

__version__ = "0.1.0"
