"""ModSAR: modular self-attentive sequential recommendation, AE (bidirectional) vs AR (causal).

The Python API (modsar.api): `modsar.train`, `modsar.evaluate`, `modsar.load`, `modsar.results`,
`modsar.search`. The command line is `modsar --help`."""

# the core's backbones (torch-free) are registered, and the registry adds its checks to config.validate:
# any use of modsar has them
import modsar.model.backbones  # noqa: F401
from modsar.api import evaluate, load, results, search, train
from modsar.version import __version__

__all__ = ["__version__", "evaluate", "load", "results", "search", "train"]
