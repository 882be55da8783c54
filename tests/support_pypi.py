"""The chat templates other packages on the index publish, as a second real corpus (issue 41).

Beyond the llama-cpp-python sdist (tests/support_realtemplates.py), the templates people serve and
train with ship in:

* the ``vllm`` sdist: ``examples/*.jinja``, the tool-call templates its docs tell users to serve
  with (gemma-3 pythonic, Llama-4 pythonic / JSON, DeepSeek-V3 tools, granite, phi-4-mini, xLAM...),
  the fallback templates it serves models without one with (``vllm/transformers_utils/chat_templates``)
  and its renderer's test templates (``rust/src/chat/tests/templates``);
* the ``trl`` wheel: ``trl/chat_templates/*.jinja``, the templates TRL trains with (its
  ``*_training`` variants mark the assistant's tokens with ``{% generation %}``);
* the ``axolotl`` wheel: ``axolotl/utils/chat_templates/templates/*.jinja`` (Llama-4's own
  template as trainers ship it, Command-A, Jamba, EXAONE-4...).

``pypi_templates()`` downloads each pinned file once (``SOURCES``: name, version, file, sha256),
extracts its templates into the cache (``$STEADYRL_TEST_CACHE`` or ``~/.cache/steadyrl/tests/``)
as ``PACKAGE-STEM.jinja``, dropping every template whose text another one already has (this
corpus's or the llama-cpp sdist's): the same template is one case, named after where it is
first found. A file lock keeps two test processes from downloading at once; ``TemplatesUnavailable``
says why when a download is impossible (no network), and the tests skip with that reason.

Wheels come with ``pip download --only-binary :all:``. The ``vllm`` sdist cannot: pip prepares an
sdist's metadata after downloading it, and vllm's build needs torch and a Rust toolchain. So pip is
asked only for the file's address on the configured index (``pip download -vv`` prints each link it
finds; it is stopped once it has printed the pinned file's), and the file is fetched from there
and checked against its pinned sha256.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from support_realtemplates import DOWNLOAD_TIMEOUT_S, TemplatesUnavailable, cache_root, template_dir

CORPUS_VERSION = "3"


@dataclass(frozen=True)
class Source:
    """A pinned file on the index and where its chat templates lie inside it."""

    name: str
    version: str
    file: str
    sha256: str
    under: tuple[str, ...]  # the templates' folders inside the archive
    sdist: bool = False

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}"


SOURCES: tuple[Source, ...] = (
    Source("vllm", "0.33.0", "vllm-0.33.0.tar.gz",
           "f4c33c2503d52bb411146afa9618a4f48bed68912f617e6803ac8d76e4c74112",
           ("vllm-0.33.0/examples/", "vllm-0.33.0/vllm/transformers_utils/chat_templates/",
            "vllm-0.33.0/rust/src/chat/tests/templates/"), sdist=True),
    Source("trl", "1.16.0", "trl-1.16.0-py3-none-any.whl",
           "c4726e139dd40e1a41661511c639c8a68416782b2e3e8c0befebd77bb7ba0396", ("trl/chat_templates/",)),
    Source("axolotl", "0.19.0", "axolotl-0.19.0-py3-none-any.whl",
           "f28eb3ad3709975eec4adfe13307dd980c7e7917cc43cb03f2c6f26c007135cc",
           ("axolotl/utils/chat_templates/templates/",)),
)


def pypi_templates() -> tuple[Path, dict[str, str]]:
    """(the folder of the deduplicated templates, {template left out: the one with its text})."""
    from filelock import FileLock

    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"pypi-templates-{CORPUS_VERSION}"
    sdist = template_dir()  # the first corpus: a template it holds is its case already
    with FileLock(str(root / f"pypi-templates-{CORPUS_VERSION}.lock"), timeout=DOWNLOAD_TIMEOUT_S):
        if not (target / ".complete").exists():
            with tempfile.TemporaryDirectory(dir=root) as tmp:
                staged = Path(tmp) / "templates"
                staged.mkdir()
                duplicates = _extract_all(Path(tmp), staged, sdist)
                (staged / "duplicates.json").write_text(json.dumps(duplicates, indent=1, sort_keys=True))
                if target.exists():  # a half-written folder from a killed run
                    for f in target.iterdir():
                        f.unlink()
                    target.rmdir()
                staged.rename(target)
            (target / ".complete").write_text(CORPUS_VERSION)
    return target, json.loads((target / "duplicates.json").read_text())


def _extract_all(tmp: Path, into: Path, sdist: Path) -> dict[str, str]:
    seen = {hashlib.sha256(p.read_bytes()).hexdigest(): f"llama-cpp-python:{p.name}" for p in sdist.glob("*.jinja")}
    duplicates = {}
    for source in SOURCES:
        archive = _download(source, tmp)
        for path, data in _templates(source, archive):
            name = f"{source.name}-{Path(path).stem}.jinja"
            if name in duplicates or (into / name).exists():  # the same file name in another folder
                name = f"{source.name}-{Path(path).parent.name}-{Path(path).stem}.jinja"
            digest = hashlib.sha256(data).hexdigest()
            if digest in seen:
                duplicates[name] = seen[digest]
                continue
            seen[digest] = name
            (into / name).write_bytes(data)
    return duplicates


def _templates(source: Source, archive: Path):
    """``(path, bytes)`` of each ``*.jinja`` directly in one of ``source.under``'s folders of the archive."""
    def wanted(path: str) -> bool:
        return path.endswith(".jinja") and any(path.startswith(u) and "/" not in path[len(u):] for u in source.under)
    if source.sdist:
        with tarfile.open(archive) as tar:
            for member in tar:
                if member.isfile() and wanted(member.name):
                    yield member.name, tar.extractfile(member).read()
    else:
        with zipfile.ZipFile(archive) as whl:
            for path in sorted(whl.namelist()):
                if wanted(path):
                    yield path, whl.read(path)


def _download(source: Source, into: Path) -> Path:
    dest = into / source.file
    if source.sdist:
        _fetch(_link(source, into), dest)
    else:
        _pip(["download", "--no-deps", "--only-binary", ":all:", source.spec, "-d", str(into)], source)
        if not dest.exists():
            raise TemplatesUnavailable(f"pip downloaded no {source.file} for {source.spec}")
    digest = hashlib.sha256(dest.read_bytes()).hexdigest()
    if digest != source.sha256:
        raise TemplatesUnavailable(f"{source.file} has sha256 {digest}, not the pinned {source.sha256}")
    return dest


def _pip(args: list[str], source: Source) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TemplatesUnavailable(f"cannot download {source.spec}: {err}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TemplatesUnavailable(f"cannot download {source.spec} (pip exited {done.returncode}): {tail[0]}")


def _link(source: Source, into: Path) -> str:
    """The address of ``source.file`` on the index pip is configured with (module docstring)."""
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "-vv", "--no-deps",
           "--no-binary", ":all:", "--no-build-isolation", source.spec, "-d", str(into / "pip")]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as err:
        raise TemplatesUnavailable(f"cannot run pip to find {source.file}: {err}") from None
    try:
        for line in proc.stdout:
            words = line.split()
            if len(words) > 2 and words[0] == "Found" and words[1] == "link" and \
                    words[2].split("#", 1)[0].endswith("/" + source.file):
                return words[2].split("#", 1)[0]
    finally:
        proc.kill()
        proc.wait()
    raise TemplatesUnavailable(f"pip found no link to {source.file} on the configured index")


def _fetch(url: str, dest: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response, dest.open("wb") as out:
            while chunk := response.read(1 << 20):
                out.write(chunk)
    except OSError as err:
        raise TemplatesUnavailable(f"cannot download {dest.name}: {err}") from None


def pypi_families(folder: Path):
    """(a family per template, read off the template as for the sdist's unnamed ones; {template
    left out: why}) (tests/support_sdist.py)."""
    from support_sdist import infer_family

    families, skipped = [], {}
    for path in sorted(folder.glob("*.jinja")):
        found = infer_family(path)
        if isinstance(found, str):
            skipped[path.name] = found
        else:
            families.append(found)
    return families, skipped


def classify(case) -> str:
    """One case's class: ``exact`` (accepted, the episode is the ground truth), ``refused`` (refused,
    and this mode's episode is indeed not exact, or the template never shows the tools: the scripted
    episode renders, but no model learns to call a tool it is never shown), ``falsely refused`` (refused although this mode's
    episode is exact), ``loud`` (accepted, not exact, but the drift metric says so) or ``silently
    wrong`` (accepted, not exact, nothing says so)."""
    if case.verdict != "exact":
        shows_no_tools = "ignores tools=" in case.verdict  # no call it could teach: refused by design
        return "falsely refused" if case.episode == "exact" and not shows_no_tools else "refused"
    if case.episode == "exact":
        return "exact"
    return "loud" if "retokenize_drift" in case.episode else "silently wrong"
