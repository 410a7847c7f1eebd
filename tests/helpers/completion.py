"""Running the generated bash completion as bash does on TAB (completion tests)."""
from __future__ import annotations

import shutil
import subprocess

bash = shutil.which("bash")


def complete(shell_script: str, line: str, cwd, env) -> list:
    """COMPREPLY for ``line`` (the cursor at its end), as bash's programmable completion does."""
    script = shell_script + r'''
line="$1"
read -r -a COMP_WORDS <<< "$line"
[[ "$line" =~ [[:space:]]$ ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="$line"
COMP_POINT=${#line}
_tfcluster tfcluster "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
'''
    out = subprocess.run([bash, "--norc", "--noprofile", "-c", script, "bash", line], cwd=cwd,
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [w for w in out.stdout.splitlines() if w]
