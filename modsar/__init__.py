"""ModSAR: modular self-attentive sequential recommendation, AE (bidirectional) vs AR (causal)."""

__version__ = "0.2.0"
