"""Keep secrets out of what tfcluster prints and writes."""
from __future__ import annotations

import re
from typing import Dict, Iterable, List

SECRET_NAME = re.compile(
    r"(?i)(pass(word|wd|phrase)?|secret|token|api_?key|access_?key|private_?key|credential|"
    r"auth|session_?key|(^|_)key$)")
MASK = "****"


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def mask_env(env: Dict[str, str]) -> Dict[str, str]:
    """A copy of ``env`` whose secret-looking values are masked."""
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}


def secret_values(*envs: Dict[str, str]) -> List[str]:
    """Values of secret-looking variables, long enough to mask safely, longest first."""
    values = {v for env in envs for k, v in env.items() if is_secret_name(k) and len(v) >= 4}
    return sorted(values, key=len, reverse=True)


class Masker:
    """Replaces known secret values in text (task output, logs)."""

    def __init__(self, values: Iterable[str]):
        values = [v for v in values if v]
        self.pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def __call__(self, text: str) -> str:
        if self.pattern is None:
            return text
        return self.pattern.sub(MASK, text)
