"""cauchylin: exact Cauchy-vector algebra, Pyro distributions and causal decision heads."""

__version__ = "0.1.0.dev0"
