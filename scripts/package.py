"""Build the Lambda artefacts without Docker: ``build/function.zip`` (just ``src/``) and ``build/layer.zip``
(the pinned runtime packages and the Deno binary, for the chosen architecture).

Usage::

    python scripts/package.py function                 # seconds: what make deploy-lambda-fast uploads
    python scripts/package.py layer --arch arm64       # pip cross-downloads manylinux wheels for python3.12
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
MACHINES = {"arm64": "aarch64", "x86_64": "x86_64"}
# Lambda's python3.12 runtime is Amazon Linux 2023 (glibc 2.34): any manylinux wheel up to 2_34 runs there.
GLIBC_TAGS = ["manylinux2014"] + [f"manylinux_2_{minor}" for minor in range(17, 35)]
SKIP = {".pytest_cache"}
LAMBDA_PYTHON = (3, 12)
CA_DIR = "chatloop-ca"
"""The hashed CA directory in the layer's site-packages (``hash_ca_bundle``; ``providers.sdk.CA_DIR`` finds it)."""


def zip_tree(source: Path, target: Path) -> None:
    """Zip ``source``'s contents (not the folder itself), keeping file modes (the Deno binary stays executable)
    and fixing timestamps so the same tree always gives the same zip and CodeSha256."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as archive:
        for path in sorted(source.rglob("*")):
            if any(part in SKIP for part in path.parts) or not path.is_file():
                continue
            info = zipfile.ZipInfo(str(path.relative_to(source)), date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (path.stat().st_mode & 0o777 | 0o100000) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())


def code_sha256(path: Path) -> str:
    """What Lambda reports as CodeSha256: base64 of the zip's SHA-256."""
    return base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()


def compile_bytecode(tree: Path) -> None:
    """Ship bytecode: Lambda's /var/task and /opt are read-only, so without it every cold start compiles every module
    from source (measured: ~260 ms -> ~180 ms for ``import app``). Unchecked-hash .pyc files stay valid whatever
    timestamps the zip gives the sources. Only a Python of the runtime's version can write them usefully."""
    if sys.version_info[:2] != LAMBDA_PYTHON:
        print(
            f"warning: Python {sys.version_info[0]}.{sys.version_info[1]} is not the Lambda runtime's "
            f"{LAMBDA_PYTHON[0]}.{LAMBDA_PYTHON[1]}: shipping sources without bytecode",
            file=sys.stderr,
        )
        return
    for cache in tree.rglob("__pycache__"):
        shutil.rmtree(cache)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "compileall",
            "-q",
            "-j",
            "0",
            "--invalidation-mode",
            "unchecked-hash",
            str(tree),
        ],
        check=False,  # a package may ship a file that is not Python 3 (a template, a test fixture): checked below
        stdout=subprocess.DEVNULL,
    )
    missing = missing_bytecode(tree)
    if missing:
        raise SystemExit(f"no bytecode for {len(missing)} module(s) that compile: {missing[:5]}")


def missing_bytecode(tree: Path) -> list[str]:
    """The ``.py`` files under ``tree`` that compile but have no unchecked-hash ``.pyc`` for this Python beside
    them: each would be compiled again on every cold start (Lambda's code directories are read-only)."""
    import importlib.util

    magic = importlib.util.MAGIC_NUMBER
    missing = []
    for source in sorted(tree.rglob("*.py")):
        cached = Path(importlib.util.cache_from_source(str(source)))
        try:
            header = cached.read_bytes()[:8]
        except OSError:
            header = b""
        # PEP 552: the magic number, then flags: 0b01 = hash-based, 0b10 = check_source (unset: unchecked)
        if header[:4] == magic and int.from_bytes(header[4:8], "little") == 0b01:
            continue
        try:
            compile(source.read_bytes(), str(source), "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue  # not importable by this Python either way (a template, a Python 2 fixture)
        missing.append(str(source.relative_to(tree)))
    return missing


def build_function(build: Path = BUILD, source: Path = ROOT / "src") -> Path:
    """``build/function.zip`` from ``source`` (``src/``; the bench also builds an older commit's)."""
    staged = build / "function"
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(source, staged, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    compile_bytecode(staged)
    write_code_cache(staged)
    target = build / "function.zip"
    zip_tree(staged, target)
    return target


CODE_CACHE_RUN = """
import sys
sys.path[:0] = [sys.argv[1]]
from chatloop import codecache


def first_turn():
    import urllib.request

    import app
    from chatloop.api.runtime import build_schemas
    from chatloop.providers import warmup
    from chatloop.tools.javascript import sandbox

    sandbox.suspend_all()  # the registry's sandbox is built, its Deno process never started
    runtime = app.app.state.runtime
    getattr(runtime, "tools", runtime).registry()  # an older tree, built by the bench, has it on the runtime
    warmup.prime("groq")  # the default chain's SDK: its modules, client, chunk schema
    build_schemas()  # the request bodies' validators
    urllib.request.Request("https://api.groq.com/openai/v1")  # as httpx reads a response's cookies: 2 patterns


def later():
    from chatloop.lazy import ROUTES as LAZY_MODULES
    from chatloop.tools.javascript import sandbox

    app = sys.modules["app"]
    from chatloop import snapstart

    # the other SDKs (for bedrock: members, the tree's own: an older tree's, built by the bench, primes boto3), the
    # routes imported on first use
    bedrock = getattr(snapstart, "SDK_MODULES", {}).get("bedrock")
    app.app.state.runtime.prime(["openai", *([bedrock] if bedrock else [])], LAZY_MODULES)
    sandbox.close_all()


print(codecache.build(sys.argv[1], first_turn, later))
"""
"""What the tables of ``chatloop.codecache`` are made from: ``import app`` and what a first /chat turn imports or
builds (the groq SDK, its client and chunk schema, the request bodies' validators), then what later requests import
(the openai SDK, botocore and its ``bedrock-runtime`` data, the routes imported on first use: a SnapStart snapshot's
priming)."""


def write_code_cache(staged: Path) -> int:
    """``chatloop/codecache*.marshal`` in the staged function: what ``dataclasses``, ``typing`` and ``re`` compile
    during ``import app``, a first turn and later imports (~90 ms of CPU at every cold start otherwise), compiled here
    by a fresh interpreter with the function first on its path and this environment's packages (the same pins as
    the layer: a text they would make differently is compiled at run time, as before). Only a Python of the
    runtime's version can write it usefully (it is marshal data, as a .pyc is). Returns its entries (0: none)."""
    if sys.version_info[:2] != LAMBDA_PYTHON or not (staged / "chatloop" / "codecache.py").is_file():
        return 0
    home = staged.parent / "codecache-home"
    home.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-I", "-B", "-c", CODE_CACHE_RUN, str(staged)],
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "TMPDIR": str(home),
            "POWERTOOLS_SERVICE_NAME": "chatloop-build",
            "POWERTOOLS_LOG_LEVEL": "ERROR",
            "POWERTOOLS_METRICS_DISABLED": "true",
        },
        cwd=home,
        capture_output=True,
        text=True,
        check=False,
    )
    shutil.rmtree(home, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"writing the code cache failed: {done.stderr[-2000:]}")
    return int(done.stdout.strip().splitlines()[-1])


def build_layer(arch: str, build: Path = BUILD, requirements: Path = ROOT / "requirements.txt") -> Path:
    """``build/layer.zip``: ``requirements`` (the pinned runtime packages) as manylinux wheels for ``arch`` and
    python3.12, compiled to bytecode, and the Deno binary."""
    machine = MACHINES[arch]
    root = build / "layer"
    shutil.rmtree(root, ignore_errors=True)
    platforms = [arg for tag in GLIBC_TAGS for arg in ("--platform", f"{tag}_{machine}")]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-compile",
            "--target",
            str(root / "python"),
            "--implementation",
            "cp",
            "--python-version",
            "3.12",
            "--only-binary=:all:",
            *platforms,
            "-r",
            str(requirements),
        ],
        check=True,
    )
    deno = root / "python" / "bin" / "deno"
    if not deno.is_file():
        raise SystemExit("the deno wheel did not provide bin/deno")
    deno.chmod(0o755)
    hash_ca_bundle(root / "python")
    compile_bytecode(root / "python")
    (root / "python" / "bin" / "chatloop-arch").write_text(arch + "\n")
    target = build / "layer.zip"
    zip_tree(root, target)
    return target


def hash_ca_bundle(site: Path) -> Path | None:
    """certifi's CA bundle (what httpx trusts by default) split into an OpenSSL hashed directory, ``CA_DIR`` beside
    it: a TLS context made with ``capath=`` loads the one CA a handshake needs, where ``cafile=`` parses all ~120 as
    it is made (~20 ms of CPU, ~70 ms at 512 MB, on every cold start: ``providers.sdk.tls_context``). Needs the
    ``openssl`` command (its ``rehash``); without it, nothing is written and the runtime loads the bundle."""
    bundle = site / "certifi" / "cacert.pem"
    openssl = shutil.which("openssl")
    if not bundle.is_file() or openssl is None:
        print("warning: no certifi bundle or no openssl command: no hashed CA directory", file=sys.stderr)
        return None
    target = site / CA_DIR
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir()
    pem = bundle.read_text()
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    certificates = [begin + part.split(end)[0] + end + "\n" for part in pem.split(begin)[1:]]
    for number, certificate in enumerate(certificates):
        (target / f"ca{number}.pem").write_text(certificate)
    subprocess.run([openssl, "rehash", str(target)], check=True, capture_output=True)
    for link in sorted(target.iterdir()):
        if link.is_symlink():  # <subject hash>.<n> -> caN.pem: made a file, so the zip holds each CA once
            content = link.read_bytes()
            link.unlink()
            link.write_bytes(content)
    for source in target.glob("ca*.pem"):
        source.unlink()
    if len(list(target.iterdir())) != len(certificates):
        raise SystemExit(
            f"hashing the CA bundle gave {len(list(target.iterdir()))} of {len(certificates)} CAs"
        )
    return target


def unzipped_size(path: Path) -> int:
    with zipfile.ZipFile(path) as archive:
        return sum(i.file_size for i in archive.infolist())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["function", "layer", "all"])
    parser.add_argument("--arch", choices=sorted(MACHINES), default=os.environ.get("ARCH", "arm64"))
    parser.add_argument("--build-dir", type=Path, default=BUILD)
    args = parser.parse_args()
    built = []
    if args.what in ("function", "all"):
        built.append(build_function(args.build_dir))
    if args.what in ("layer", "all"):
        built.append(build_layer(args.arch, args.build_dir))
    for path in built:
        print(
            f"{path}: {path.stat().st_size / 1e6:.1f} MB zipped, "
            f"{unzipped_size(path) / 1e6:.1f} MB unzipped, CodeSha256 {code_sha256(path)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
