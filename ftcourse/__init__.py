"""ftcourse: the package behind the course on adapting pretrained encoders.

Notebooks tell the story; the functions they call live here, one module per concern:
``config`` (profiles, settings), ``data`` (benchmarks), ``models`` (which model plays
which role), ``heads`` (task heads over an encoder), ``training`` (the fine-tuning loop).
"""

from .config import Profile, get_profile
from .setup import seed_everything, setup

__all__ = ["Profile", "get_profile", "seed_everything", "setup"]
__version__ = "0.1.0"
