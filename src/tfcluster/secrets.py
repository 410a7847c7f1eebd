"""Keep secrets out of what tfcluster prints and writes: one policy for every path.

A variable is secret when the cluster file declares it (``secrets: [NAME, ...]``) or when its
name looks secret (:func:`is_secret_name`). The name is split into words at ``_``, ``-``,
``.`` and lower-to-upper case changes, and looks secret when one word is a secret word
(``TOKEN``, ``PASSWORD``, ``SECRET``, ...), it holds ``ACCESS_KEY``, ``API_KEY`` or
``PRIVATE_KEY`` (``AWS_ACCESS_KEY_ID``), or its last word is ``KEY`` -- so ``HF_TOKEN``,
``DB_PASSWORD``, ``AWS_SECRET_ACCESS_KEY`` and ``SSH_KEY`` are secret while
``TOKENIZERS_PARALLELISM``, ``MAX_TOKENS``, ``KEYBOARD`` and ``AUTHOR`` are not. A name whose
last word is ``FILE``, ``PATH`` or ``DIR`` (``PASSWORD_FILE``) names where a secret is, not the
secret, and is not masked.

What is masked:

* :func:`mask_env` -- values of secret variables in an environment (dry runs, run records,
  ``validate --json``);
* :func:`mask_argv` -- ``--api-key=VALUE`` / ``--password VALUE`` / ``TOKEN=VALUE`` words, and
  any known secret value inside a word (:func:`argv_secret_values` gives those flag values, to
  mask them in output too);
* :class:`Masker` -- known secret values wherever they appear in text (task output, logs),
  from :func:`values_to_mask`: the secret variables of the tasks' environments plus the
  declared names in the launcher's own environment (which the tasks inherit). The launcher's
  other variables are not scanned: a heuristic over all of them would mask ordinary words.
"""
from __future__ import annotations

import re
from typing import Collection, Dict, Iterable, List, Mapping, Optional, Sequence

MASK = "****"
# Words that make a name secret wherever they stand in it.
SECRET_WORDS = frozenset({
    "PASSWORD", "PASSWORDS", "PASSWD", "PASSPHRASE", "PASS",
    "SECRET", "SECRETS", "TOKEN", "APIKEY", "APITOKEN", "AUTHTOKEN", "ACCESSTOKEN",
    "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE", "PRIVATEKEY", "ACCESSKEY", "SECRETKEY",
    "SESSIONKEY", "BEARER"})
# Word pairs that make a name secret wherever they stand (AWS_ACCESS_KEY_ID).
SECRET_PAIRS = frozenset({("ACCESS", "KEY"), ("API", "KEY"), ("PRIVATE", "KEY"), ("SECRET", "KEY"),
                          ("SESSION", "KEY"), ("SIGNING", "KEY"), ("ENCRYPTION", "KEY")})
# Words after which the name points at a secret instead of holding one.
LOCATION_WORDS = frozenset({"FILE", "FILES", "FILENAME", "PATH", "DIR", "DIRECTORY"})
# A value shorter than this is not masked inside text: "1" or "yes" would mask half the output.
MIN_MASKED_LENGTH = 4

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def name_words(name: str) -> List[str]:
    """``awsSecretAccessKey`` / ``AWS_SECRET_ACCESS_KEY`` / ``--api-key`` -> upper-case words."""
    return [w.upper() for part in re.split(r"[^A-Za-z0-9]+", name) for w in _WORDS.findall(part)]


def is_secret_name(name: str) -> bool:
    """Whether a variable or flag name looks like it holds a secret (the heuristic alone)."""
    words = name_words(name)
    if not words or words[-1] in LOCATION_WORDS:
        return False
    if words[-1] == "KEY":
        return True
    return any(w in SECRET_WORDS for w in words) or any(p in SECRET_PAIRS for p in zip(words, words[1:]))


def is_secret(name: str, declared: Collection[str] = ()) -> bool:
    """The policy: declared in the file's ``secrets:``, or a name that looks secret."""
    return name in declared or is_secret_name(name)


def mask_env(env: Mapping[str, str], declared: Collection[str] = ()) -> Dict[str, str]:
    """A copy of ``env`` whose secret values are masked."""
    return {k: (MASK if v and is_secret(k, declared) else v) for k, v in env.items()}


def secret_values(*envs: Mapping[str, str], declared: Collection[str] = ()) -> List[str]:
    """Values of the secret variables of ``envs``, long enough to mask safely, longest first."""
    values = {v for env in envs for k, v in env.items()
              if is_secret(k, declared) and len(v) >= MIN_MASKED_LENGTH}
    return sorted(values, key=len, reverse=True)


def values_to_mask(task_envs: Iterable[Mapping[str, str]], declared: Collection[str] = (),
                   environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """What the launcher masks in task output: the secret values of the tasks' environment
    additions (file ``env``), and the values of the declared names in ``environ`` (the
    launcher's environment, which the tasks inherit). Other launcher variables are not scanned."""
    declared_env = {k: v for k, v in (environ or {}).items() if k in declared}
    return secret_values(*task_envs, declared_env, declared=declared)


def mask_argv(argv: Sequence[str], declared: Collection[str] = (),
              values: Iterable[str] = ()) -> List[str]:
    """``argv`` with the values of secret-looking flags masked (``--api-key=V``,
    ``--password V``, ``-password=V``, ``API_TOKEN=V``) and any of ``values`` masked inside
    words. For run records and dry runs: a masked argv is for reading, not for running."""
    masker = Masker(values)
    return [masker(word) if secret is None else word[:len(word) - len(secret)] + MASK
            for word, secret in _argv_secrets(argv, declared)]


def argv_secret_values(argv: Sequence[str], declared: Collection[str] = ()) -> List[str]:
    """The values that :func:`mask_argv` masks as flag values (to mask them in task output too,
    with :class:`Masker`)."""
    return [secret for _, secret in _argv_secrets(argv, declared)
            if secret and len(secret) >= MIN_MASKED_LENGTH]


def _argv_secrets(argv: Sequence[str], declared: Collection[str]):
    """(word, its secret part or None) for each word of ``argv``."""
    mask_next = False
    for word in argv:
        word = str(word)
        if mask_next:
            mask_next = False
            if word and not word.startswith("-"):
                yield word, word
                continue
        if word.startswith("-") and not word.startswith("---"):
            flag, eq, value = word.lstrip("-").partition("=")
            if flag and (is_secret(flag, declared) or _declared_flag(flag, declared)):
                if eq and value:
                    yield word, value
                    continue
                mask_next = not eq
        elif "=" in word:
            name, _, value = word.partition("=")
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) and value and is_secret(name, declared):
                yield word, value
                continue
        yield word, None


def _declared_flag(flag: str, declared: Collection[str]) -> bool:
    """``--api-key`` names the declared variable ``API_KEY``."""
    return bool(declared) and flag.replace("-", "_").upper() in {d.upper() for d in declared}


class Masker:
    """Replaces known secret values in text (task output, logs)."""

    def __init__(self, values: Iterable[str]):
        values = sorted({v for v in values if v}, key=len, reverse=True)
        self.pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def __call__(self, text: str) -> str:
        if self.pattern is None:
            return text
        return self.pattern.sub(MASK, text)
