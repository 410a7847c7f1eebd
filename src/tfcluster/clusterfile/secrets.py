"""Keep secrets out of what tfcluster prints and writes: one policy for every path.

A variable is secret when the cluster file declares it (``secrets: [NAME, ...]``) or when its
name looks secret (:func:`is_secret_name`). The name is split into words at ``_``, ``-``,
``.`` and lower-to-upper case changes, and the words are read from the end ("word-based on both
sides": a secret word must be a whole word, and it must be what the name is about):

* its last word is a secret word (``TOKEN``, ``PASSWORD``, ``SECRET``, ``AUTH``, ...), or ends
  with a long one (``PGPASSWORD``, ``DBPASSWORD``), or is ``PWD`` after another word
  (``MYSQL_PWD``, not ``PWD`` or ``OLDPWD``), or is ``KEY`` (``SSH_KEY``, ``KEY``) unless the word
  before it names an ordinary key (``SORT_KEY``, ``PARTITION_KEY``, ``CACHE_KEY``);
  trailing words like ``PROD``, ``V2``, ``B64`` or a number are skipped first (``DB_PASSWORD_PROD``);
* or it holds ``ACCESS_KEY``, ``API_KEY``, ``PRIVATE_KEY``, ``SECRET_KEY``, ... anywhere
  (``AWS_ACCESS_KEY_ID``).

So ``HF_TOKEN``, ``DB_PASSWORD``, ``AWS_SECRET_ACCESS_KEY``, ``PGPASSWORD`` and ``MYSQL_PWD`` are
secret while ``TOKEN_LIMIT``, ``MAX_TOKENS``, ``SORT_KEY``, ``SSH_AUTH_SOCK``, ``KEYBOARD`` and
``AUTHOR`` are not. A name whose last word is ``FILE``, ``PATH`` or ``DIR`` (``PASSWORD_FILE``)
names where a secret is, not the secret, and is not masked; nor are a few well-known variables
that hold a path or a socket (``GOOGLE_APPLICATION_CREDENTIALS``, ``SSH_AUTH_SOCK``).

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
  A value spread over several lines (a PEM key) is masked line by line, each line of at least
  a few characters. Only values that cannot be ordinary output are masked inside text
  (:func:`maskable_in_text`): never a number (``TOKEN_LIMIT: "1000"`` must not turn every
  ``1000`` and progress line into ``****``), never a short or one-kind word (``true``).
"""
from __future__ import annotations

import functools
import re
from typing import Collection, Dict, Iterable, List, Mapping, Optional, Sequence, Set

MASK = "****"
# Words that make a name secret when the name ends with them.
SECRET_WORDS = frozenset({
    "PASSWORD", "PASSWORDS", "PASSWD", "PASSPHRASE", "PASS",
    "SECRET", "SECRETS", "TOKEN", "APIKEY", "APITOKEN", "AUTHTOKEN", "ACCESSTOKEN",
    "CREDENTIAL", "CREDENTIALS", "AUTH", "COOKIE", "PRIVATEKEY", "ACCESSKEY", "SECRETKEY",
    "SESSIONKEY", "BEARER"})
# Secret words long enough to count at the end of a longer word (PGPASSWORD, DBPASSWORD).
SECRET_SUFFIXES = ("PASSWORD", "PASSWD", "PASSPHRASE", "TOKEN", "SECRET", "APIKEY",
                   "CREDENTIALS", "CREDENTIAL")
# Word pairs that make a name secret wherever they stand (AWS_ACCESS_KEY_ID).
SECRET_PAIRS = frozenset({("ACCESS", "KEY"), ("API", "KEY"), ("PRIVATE", "KEY"), ("SECRET", "KEY"),
                          ("SESSION", "KEY"), ("SIGNING", "KEY"), ("ENCRYPTION", "KEY")})
# Words after which the name points at a secret instead of holding one.
LOCATION_WORDS = frozenset({"FILE", "FILES", "FILENAME", "PATH", "DIR", "DIRECTORY", "SOCK",
                            "SOCKET", "URL", "URI", "HOST", "PORT", "ENDPOINT"})
# Trailing words that qualify a secret without changing what it is (DB_PASSWORD_PROD).
QUALIFIER_WORDS = frozenset({"PROD", "PRODUCTION", "DEV", "STAGING", "TEST", "VALUE", "STRING",
                             "B64", "BASE64", "ENCODED", "RAW", "HEX", "OLD", "NEW", "CURRENT"})
# ``<X>_KEY`` names an ordinary key, not a secret, for these X.
ORDINARY_KEYS = frozenset({
    "SORT", "PARTITION", "CACHE", "PRIMARY", "SHARD", "HASH", "GROUP", "FOREIGN", "ROUTING",
    "LOOKUP", "INDEX", "DICT", "MAP", "JOIN", "RANGE", "ROW", "COLUMN", "FEATURE", "LABEL",
    "INPUT", "OUTPUT", "TARGET", "MODEL", "METRIC", "DATA", "BATCH", "SEED", "SPLIT", "ORDER",
    "UNIQUE", "COMPOSITE", "SEARCH", "QUERY", "DEDUP", "DEDUPE", "BUCKET", "CLUSTER", "EVENT",
    "MONITOR", "SUMMARY", "CHECKPOINT", "RESULT", "TABLE", "FIELD", "SORTING", "CLUSTERING"})
# Well-known variables whose names look secret but hold a path or a socket; and tfcluster's
# run token, which names a run (a task never trains against another run's ps) and grants nothing:
# `tfcluster commands` writes it into every line, so that lines run by hand share it.
NOT_SECRET_NAMES = frozenset({"GOOGLE_APPLICATION_CREDENTIALS", "SSH_AUTH_SOCK",
                              "GPG_AGENT_INFO", "KRB5CCNAME", "AWS_SHARED_CREDENTIALS_FILE",
                              "TFCLUSTER_RUN_TOKEN"})
# A value shorter than this is not masked inside text: "1" or "yes" would mask half the output.
MIN_MASKED_LENGTH = 4
# ... and one of fewer than this many characters must mix kinds (letters and digits, ...).
PLAIN_MASKED_LENGTH = 8

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def name_words(name: str) -> List[str]:
    """``awsSecretAccessKey`` / ``AWS_SECRET_ACCESS_KEY`` / ``--api-key`` -> upper-case words."""
    return [w.upper() for part in re.split(r"[^A-Za-z0-9]+", name) for w in _WORDS.findall(part)]


@functools.lru_cache(maxsize=4096)     # a pure function of the name; the run record asks per task
def is_secret_name(name: str) -> bool:
    """Whether a variable or flag name looks like it holds a secret (the heuristic alone)."""
    words = name_words(name)
    if not words or name.strip("-").upper().replace("-", "_") in NOT_SECRET_NAMES:
        return False
    if any(p in SECRET_PAIRS for p in zip(words, words[1:])):
        return True
    while len(words) > 1 and (words[-1] in QUALIFIER_WORDS or words[-1].isdigit()
                              or re.fullmatch(r"V[0-9]+", words[-1])):
        words = words[:-1]
    last = words[-1]
    if last in LOCATION_WORDS:
        return False
    if last == "KEY":
        return len(words) == 1 or words[-2] not in ORDINARY_KEYS
    if last == "PWD":
        return len(words) > 1
    return last in SECRET_WORDS or any(last.endswith(w) for w in SECRET_SUFFIXES)


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def maskable_in_text(value: str) -> bool:
    """Whether ``value`` is safe to replace wherever it appears in output: at least
    MIN_MASKED_LENGTH characters, never a number (``1000``, ``0.1``: a step, a loss, a progress
    line), and below PLAIN_MASKED_LENGTH characters it must mix kinds of characters (``hf_x``,
    ``abc123``; not ``true`` or ``adam``)."""
    v = value.strip()
    if len(v) < MIN_MASKED_LENGTH or _is_number(v):
        return False
    if len(v) >= PLAIN_MASKED_LENGTH:
        return True
    kinds = sum(1 for test in (str.islower, str.isupper, str.isdigit) if any(test(c) for c in v))
    kinds += any(not c.isalnum() for c in v)
    return kinds >= 2


def text_targets(value: str) -> List[str]:
    """What to look for in output for one secret value: the value, and each line of a value
    that spans lines (output is read and masked line by line), when :func:`maskable_in_text`."""
    out = [value] if maskable_in_text(value) else []
    if "\n" in value or "\r" in value:
        out += [line.strip() for line in value.splitlines() if maskable_in_text(line)]
    return out


def is_secret(name: str, declared: Collection[str] = ()) -> bool:
    """The policy: declared in the file's ``secrets:``, or a name that looks secret."""
    return name in declared or is_secret_name(name)


def holders(envs: Iterable[Mapping[str, str]], declared: Collection[str] = ()) -> Set[str]:
    """Names of variables that are not secret by name but whose value holds the value of a
    secret variable of the same environment (``CURL_ARGS: "-H 'Authorization: $TOKEN'"`` with
    the token written out): they are secret too, so their whole value is masked in
    run.json, ``validate``, dry runs and the Slurm script, and a render puts them in the Secret.
    A value is looked for as in task output (:func:`maskable_in_text`)."""
    out: Set[str] = set()
    for env in envs:
        masker = Masker(v for k, v in env.items() if v and is_secret(k, declared))
        if masker.pattern is None:
            continue
        out.update(k for k, v in env.items()
                   if v and not is_secret(k, declared) and masker.pattern.search(v))
    return out


def mask_env(env: Mapping[str, str], declared: Collection[str] = (),
             values: Iterable[str] = ()) -> Dict[str, str]:
    """A copy of ``env`` whose secret values are masked, and any of ``values`` (the run's other
    secrets: a ``--db-password=...`` of the program's argv, say) masked inside the others."""
    masker = Masker(values)
    return {k: (MASK if v and is_secret(k, declared) else (masker(v) if v else v))
            for k, v in env.items()}


def secret_values(*envs: Mapping[str, str], declared: Collection[str] = ()) -> List[str]:
    """Values of the secret variables of ``envs``, long enough to mask safely, longest first."""
    values = {t for env in envs for k, v in env.items() if v and is_secret(k, declared)
              for t in text_targets(v)}
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
    return [t for _, secret in _argv_secrets(argv, declared) if secret for t in text_targets(secret)]


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
        values = sorted({t for v in values if v for t in text_targets(v)}, key=len, reverse=True)
        self.pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def __call__(self, text: str) -> str:
        if self.pattern is None:
            return text
        return self.pattern.sub(MASK, text)
