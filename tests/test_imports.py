"""Heavy imports only where they are used (issue 16): `import scipy.stats` costs about 1.5 s, and
only the trend tests on binned layer statistics and the sample-recurrence test need it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_diagnosing_a_plain_log_never_imports_scipy_stats(tmp_path):
    log = next((ROOT / "sample_logs" / "real" / "dev").glob("litgpt-291-*/*.log"))
    code = (
        "import sys\n"
        "from spikeforensics import api\n"
        f"api.ingest([{str(log)!r}], run_id='r', store={str(tmp_path)!r})\n"
        f"d = api.diagnose(api.load_run('r', {str(tmp_path)!r}))\n"
        "assert d['verdict']['status'] == 'unstable', d['verdict']\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"
