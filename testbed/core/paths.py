"""Where the checkout (or the image's copy of it) is: the folder that holds testbed/, exp_config.py, build/."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
