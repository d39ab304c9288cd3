"""A broken exp_config.py (syntax error, unknown name, anything its body raises) is one line 'file:line: what',
from the loader and from every entry point that reads it."""
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.core.config import load_exp_config

REPO = Path(__file__).resolve().parents[2]

BROKEN = {  # file text -> the message after 'file:'
    "REGIONS = 3\nSHARDS_PER_REGION = \n": "2: invalid syntax (SHARDS_PER_REGION =)",
    "REGIONS = 3\n\nSHARDS_PER_REGION = x\n": "3: NameError: name 'x' is not defined",
    "REGIONS = 3\nif True:\n    A = 1\n      B = 2\n": "4: unexpected indent (B = 2)",
    "import math\nREGIONS = int('three')\n": "2: ValueError: invalid literal for int() with base 10: 'three'",
    "def f():\n    return {}['k']\n\nREGIONS = f()\n": "2: KeyError: 'k'",   # the innermost line of the file
    "import json\n\nREGIONS = json.loads('{')\n":                            # the config's line, not json's
        "3: JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
    "REGIONS = 1 / 0\n": "1: ZeroDivisionError: division by zero",
}


@pytest.mark.parametrize("text,what", BROKEN.items(), ids=["syntax", "name", "indent", "value", "call", "library", "zero"])
def test_broken_config_is_one_line_with_file_and_line(tmp_path, monkeypatch, text, what):
    p = tmp_path / "exp_config.py"
    p.write_text(text)
    with pytest.raises(ValueError) as e:
        load_exp_config(p)
    assert str(e.value) == f"{p}:{what}"
    assert e.value.__cause__ is None and e.value.__suppress_context__   # no chained traceback behind it
    monkeypatch.chdir(tmp_path)   # below the working directory: shown relative, as a user types it
    with pytest.raises(ValueError) as e:
        load_exp_config("exp_config.py")
    assert str(e.value) == f"exp_config.py:{what}"


def test_syntax_error_in_a_file_the_config_imports_names_that_file(tmp_path, monkeypatch):
    (tmp_path / "helper_knobs.py").write_text("X = (\n")
    (tmp_path / "exp_config.py").write_text("import helper_knobs\nREGIONS = 3\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=r"^helper_knobs\.py:1: '\(' was never closed"):
        load_exp_config("exp_config.py")


def test_good_config_still_loads_and_bad_values_keep_their_messages(tmp_path):
    p = tmp_path / "exp_config.py"
    p.write_text("REGIONS = 4\n")
    assert load_exp_config(p).regions == 4
    p.write_text("REGIONS = 0\n")
    with pytest.raises(ValueError, match=r"^REGIONS=0: must be an integer in \[1, 64\]$"):
        load_exp_config(p)


@pytest.mark.parametrize("script,prog", [("run_experiments.py", "experiments/exp1_n_clients.py"),
                                         ("start_containers.py", "start_containers"),
                                         ("genConfig.py", "genConfig")])
@pytest.mark.parametrize("text,what", list(BROKEN.items())[:2], ids=["syntax", "name"])
def test_entry_points_print_one_line(tmp_path, script, prog, text, what):
    (tmp_path / "exp_config.py").write_text(text)
    # every one of them reads the config before anything else (no Docker, no processes): --backend local keeps
    # run_experiments.py from even asking whether Docker is there
    extra = ["--backend", "local"] if script == "run_experiments.py" else []
    p = subprocess.run([sys.executable, str(REPO / script), "--config", "exp_config.py", *extra], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [f"{prog}: error: exp_config.py:{what}"]
    assert "Traceback" not in p.stdout
