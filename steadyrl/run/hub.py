"""``steadyrl export RUN --push-to-hub REPO``: an exported model directory uploaded to the Hugging Face Hub.

:func:`check_push` runs before anything is exported (a missing token or a malformed repo name is
an input error: exit 2 at once, not after a LoRA merge); :func:`push_folder` creates the model
repository when it does not exist and uploads the directory in one commit, through
``huggingface_hub``'s API (installed with transformers). The token comes from ``--token``, else
the usual places ``huggingface_hub`` reads (``HF_TOKEN``, the file ``huggingface-cli login``
writes); it is never printed, and never left in an error message. ``HF_ENDPOINT`` points the
upload at another hub (a private one, or the tests' stand-in server).

What is uploaded: the folder's regular files only, each opened with ``O_NOFOLLOW``; a symbolic
link anywhere in it is refused (exit 2, naming it) before anything is sent: a link to
``~/.cache/huggingface/token`` would otherwise publish the file it points to. The repository is
created private unless ``public`` (``steadyrl export --public``).
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path

from ..errors import ConfigError
from ..files import NOFOLLOW, regular_files

TOKEN_HELP = ("set HF_TOKEN to a token with write access (https://huggingface.co/settings/tokens), run "
              "huggingface-cli login, or pass --token")


def check_push(repo_id: str, token: str | None) -> str:
    """The token to push ``repo_id`` with; :class:`ConfigError` for a repo name the hub would
    refuse or no token at all. Nothing is sent."""
    from huggingface_hub import get_token
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ConfigError(f"--push-to-hub {repo_id!r} is not a valid repository name ({_first_line(exc)}); "
                          "valid: NAME or OWNER/NAME, letters, digits, '-', '_', '.' (at most 96 characters)") from None
    if repo_id.count("/") > 1:
        raise ConfigError(f"--push-to-hub {repo_id!r}: expected NAME or OWNER/NAME (one '/' at most)")
    token = token or get_token()
    if not token:
        raise ConfigError(f"--push-to-hub {repo_id!r} needs a Hugging Face token: {TOKEN_HELP}")
    return token


def _open_files(folder: Path, stack: ExitStack) -> list:
    """One upload operation per regular file of ``folder``, each opened without following a link."""
    from huggingface_hub import CommitOperationAdd

    from .export import refuse_links

    refuse_links(folder)
    ops = []
    for rel in regular_files(folder):
        fd = os.open(folder / rel, os.O_RDONLY | NOFOLLOW)
        handle = stack.enter_context(os.fdopen(fd, "rb"))
        ops.append(CommitOperationAdd(path_in_repo=rel.as_posix(), path_or_fileobj=handle))
    return ops


def push_folder(folder: Path, repo_id: str, token: str, *, private: bool = True, message: str = "") -> str:
    """Create model repository ``repo_id`` if needed (private unless ``private=False``) and upload
    ``folder``'s regular files to it in one commit; returns the repository's URL. A link in
    ``folder`` is a :class:`ConfigError` naming it, before anything is sent. An HTTP failure is a
    :class:`ConfigError` naming the repository and the hub's answer (the token redacted)."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=token)
    try:
        with ExitStack() as stack:
            operations = _open_files(Path(folder), stack)
            url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
            api.create_commit(repo_id=str(url.repo_id), repo_type="model", operations=operations,
                              commit_message=message or f"steadyrl export of {Path(folder).name}")
    except ConfigError:
        raise
    except (HfHubHTTPError.__bases__[0], OSError, ValueError) as exc:  # the HTTP library's errors (httpx / requests)
        why = _first_line(exc).replace(token, "***")
        status = getattr(getattr(exc, "response", None), "status_code", None)
        hint = f"; {TOKEN_HELP}" if status in (401, 403) else ""
        raise ConfigError(f"--push-to-hub {repo_id!r}: the upload failed: {why}{hint}") from None
    return str(url)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
