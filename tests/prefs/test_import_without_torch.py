"""`import offrl` and the CLI's parser (including `offrl prefs --help`) must not need torch."""

import subprocess
import sys

CODE = """
import sys
sys.modules['torch'] = None          # any `import torch` now raises ImportError
sys.modules['transformers'] = None
import offrl, offrl.cli
parser = offrl.cli.build_parser()
assert 'prefs' in parser._subparsers._group_actions[0].choices
print('ok')
"""


def test_import_offrl_and_cli_without_torch():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
