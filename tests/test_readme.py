"""The README runs as written: its Python example, and its shell block (a table made, a model
trained from nothing, a prediction) in an empty folder, printing what the README shows; and it
tells the same install story as the Quickstart."""

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.docs.test_docs_examples import compare_output, parse_markdown

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICKSTART = ROOT / "docs" / "quickstart.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README lost its Python example"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    # The example's claim about shared sources: |W2 W| scale_U = 3, not |W2| |W| scale_U = 5.
    assert float(namespace["r"].scale) == 3.0


def test_readme_commands_run_as_written_in_an_empty_folder(tmp_path):
    """The train command once needed flats.csv, which only the Quickstart made. Now every file
    the commands read is made by the README itself: they run in an empty folder."""
    blocks = [b for b in parse_markdown(README) if b.shell]
    assert blocks, "the README lost its runnable shell block (<!-- docs-test: run -->)"
    env = {
        **os.environ,
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        "OMP_NUM_THREADS": "1",
    }
    for block in blocks:
        assert "cauchylin-lm train" in block.code or "cauchylin-lm predict" in block.code
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.code],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
            check=False,
        )
        assert proc.returncode == 0, f"{block.test_id}:\n{proc.stdout}\n{proc.stderr}"
        assert block.expected is not None, f"{block.test_id} shows no Output block"
        problem = compare_output(proc.stdout, block.expected, block.rtol, block.measured)
        assert problem is None, f"{block.test_id}: {problem}"


def _install_block(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    start = re.search(r"^## (?:1\. )?Install\s*$", text, re.M)
    assert start, f"{path.name} has no Install section"
    fence = re.search(r"```bash\n(.*?)```", text[start.end() :], re.S)
    assert fence, f"{path.name}: no bash block under Install"
    return fence.group(1)


def test_readme_and_quickstart_tell_one_install_story():
    """One story, virtual environment first: the same commands in both places."""
    readme, quickstart = _install_block(README), _install_block(QUICKSTART)
    assert readme == quickstart
    lines = [line.split("#")[0].strip() for line in readme.splitlines()]
    venv = next(i for i, line in enumerate(lines) if "-m venv" in line)
    torch = next(i for i, line in enumerate(lines) if "pip install torch" in line)
    package = next(i for i, line in enumerate(lines) if 'pip install -e ".[hf]"' in line)
    assert venv < torch < package
