"""Section 16 (Zipapp): the loader's choice of layers for every platform/Python (simulated), the per-OS folders,
and unpacking a small pyz written by tools/build_pyz.py: cached, concurrent, damaged, unwritable."""

import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

import localrag
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import build_pyz  # noqa: E402

PLATFORMS = tuple(build_pyz.PLATFORM_TAGS)
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def manifest_for(platforms, name="localrag-universal.pyz"):
    """A manifest shaped like build_pyz's: common, then per platform a shared layer and one per Python."""
    layers = [{"dir": "lib/common", "platform": None, "python": None, "sha256": "0" * 64}]
    facts = {}
    for p in platforms:
        layers.append({"dir": f"lib/{p}/shared", "platform": p, "python": None, "sha256": "1" * 64})
        for py in PYTHONS:
            layers.append({"dir": f"lib/{p}/cp{py.replace('.', '')}", "platform": p, "python": py,
                           "sha256": "2" * 64})
        facts[p] = {"pythons": list(PYTHONS)}
        if p.startswith("linux"):
            facts[p]["min_glibc"] = "2.28"
        if p.startswith("macos"):
            facts[p]["min_macos"] = "11.0" if p == "macos-arm64" else "10.15"
    return {"name": name, "platforms": facts, "layers": layers}


@pytest.mark.parametrize("sys_platform,machine,expected", [
    ("linux", "x86_64", "linux-x86_64"), ("linux", "aarch64", "linux-aarch64"), ("linux", "arm64", "linux-aarch64"),
    ("darwin", "arm64", "macos-arm64"), ("darwin", "x86_64", "macos-x86_64"), ("win32", "AMD64", "windows-x64"),
    ("freebsd14", "amd64", "freebsd14-amd64"), ("linux", "ppc64le", "linux-ppc64le"),
])
def test_platform_ids(sys_platform, machine, expected):
    assert localrag.pyz_platform_id(sys_platform, machine) == expected


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("python", PYTHONS)
def test_each_platform_file_picks_its_python_layer(platform, python):
    manifest = manifest_for([platform], f"localrag-{platform}.pyz")
    libc = ("glibc", "2.31") if platform.startswith("linux") else None
    macos = "14.2" if platform.startswith("macos") else ""
    layers = localrag.pyz_select(manifest, platform, tuple(map(int, python.split("."))), "cpython", libc, macos)
    assert [layer["dir"] for layer in layers] == [f"lib/{platform}/cp{python.replace('.', '')}",
                                                  f"lib/{platform}/shared", "lib/common"]


@pytest.mark.parametrize("platform", PLATFORMS)
def test_universal_file_picks_only_this_platform(platform):
    layers = localrag.pyz_select(manifest_for(PLATFORMS), platform, (3, 12), "cpython",
                                 ("glibc", "2.39") if platform.startswith("linux") else None)
    assert {layer["platform"] for layer in layers} == {platform, None}
    assert [layer["python"] for layer in layers] == ["3.12", None, None]


@pytest.mark.parametrize("built_for,running_on", [("linux-x86_64", "macos-arm64"), ("macos-arm64", "windows-x64"),
                                                  ("windows-x64", "linux-aarch64"), ("macos-x86_64", "macos-arm64")])
def test_wrong_platform_names_the_file_to_use(built_for, running_on):
    with pytest.raises(localrag.PlatformUnsupported) as err:
        localrag.pyz_select(manifest_for([built_for], f"localrag-{built_for}.pyz"), running_on, (3, 12))
    msg = err.value.message
    assert "\n" not in msg and f"localrag-{built_for}.pyz does not run on {running_on}" in msg
    assert f"localrag-{running_on}.pyz" in msg and err.value.exit_code == 3


def test_unknown_platform_says_so():
    with pytest.raises(localrag.PlatformUnsupported, match="no localrag pyz runs on freebsd14-amd64"):
        localrag.pyz_select(manifest_for(PLATFORMS), "freebsd14-amd64", (3, 12))


@pytest.mark.parametrize("python,impl", [((3, 9), "cpython"), ((3, 14), "cpython"), ((3, 8), "cpython"),
                                         ((3, 11), "pypy")])
def test_python_outside_the_carried_ones(python, impl):
    with pytest.raises(localrag.PlatformUnsupported) as err:
        localrag.pyz_select(manifest_for(["macos-arm64"], "localrag-macos-arm64.pyz"), "macos-arm64", python, impl)
    msg = err.value.message
    assert "runs on CPython 3.10-3.13" in msg and f"{python[0]}.{python[1]}" in msg
    assert "python3.13 localrag-macos-arm64.pyz" in msg and "\n" not in msg


@pytest.mark.parametrize("libc", [("glibc", "2.17"), ("", "")])
def test_old_glibc_or_musl(libc):
    with pytest.raises(localrag.PlatformUnsupported, match="needs glibc 2.28 or newer"):
        localrag.pyz_select(manifest_for(["linux-x86_64"]), "linux-x86_64", (3, 11), "cpython", libc)


def test_old_macos():
    with pytest.raises(localrag.PlatformUnsupported, match="needs macOS 11.0 or newer; this is macOS 10.15"):
        localrag.pyz_select(manifest_for(["macos-arm64"]), "macos-arm64", (3, 11), "cpython", None, "10.15.7")


UNPACK_ROOTS = [
    ("linux", {"HOME": "/home/ann"}, "/home/ann/.cache/localrag/pyz"),
    ("linux", {"HOME": "/home/ann", "XDG_CACHE_HOME": "/c"}, "/c/localrag/pyz"),
    ("darwin", {"HOME": "/Users/ann"}, "/Users/ann/Library/Caches/localrag/pyz"),
    ("win32", {"USERPROFILE": "C:/Users/ann", "LOCALAPPDATA": "C:/Users/ann/AppData/Local"},
     "C:/Users/ann/AppData/Local/localrag/Cache/pyz"),
    ("win32", {"HOME": "/h", "SHIV_ROOT": "/x/unpack"}, "/x/unpack"),
]


@pytest.mark.parametrize("sys_platform,environ,expected", UNPACK_ROOTS)
def test_unpack_root_per_os(sys_platform, environ, expected):
    assert localrag.pyz_unpack_root(environ, sys_platform) == Path(expected)


@pytest.mark.parametrize("sys_platform,environ,expected", UNPACK_ROOTS)
def test_bootstrap_keeps_compiled_code_in_the_unpack_folder(sys_platform, environ, expected):
    """The bootstrap runs before localrag.py is imported, so it carries its own copy of pyz_unpack_root's rules:
    they must agree (the code cache sits beside the layers, under SHIV_ROOT when that is set)."""
    bootstrap = {"__name__": "bootstrap"}
    exec(build_pyz.main_py(b"print()"), bootstrap)
    path = Path(bootstrap["code_path"](environ, sys_platform, "cpython-311"))
    assert path.parent == localrag.pyz_unpack_root(environ, sys_platform) == Path(expected)
    assert path.name == f"localrag-{__import__('hashlib').sha256(b'print()').hexdigest()[:16]}.cpython-311.code"


@pytest.mark.parametrize("carried", [True, False])
def test_bootstrap_keeps_compiled_code_only_for_a_python_the_file_carries(tmp_path, carried):
    """A Python the pyz has no layers for is refused by localrag.py once loaded; the bootstrap must not leave a
    compiled-code cache behind for it first."""
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    src = b"def _pyz_main(archive):\n    return 7\n"
    app = tmp_path / "tiny.pyz"
    with zipfile.ZipFile(app, "w") as zf:
        zf.writestr("__main__.py", build_pyz.main_py(src, (here,) if carried else ("3.99", "3.10")))
        zf.writestr("localrag.py", src)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run([sys.executable, str(app)], env={**env, "SHIV_ROOT": str(tmp_path / "unpack")},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 7, done.stderr
    codes = list((tmp_path / "unpack").glob("localrag-*.code")) if (tmp_path / "unpack").exists() else []
    assert len(codes) == (1 if carried else 0)


# --- unpacking a real (small) pyz written by the builder ---------------------------------------------------------

TOOL = b"#!/bin/sh\n" + b"".join(__import__("hashlib").sha256(str(i).encode()).digest() for i in range(2000))

@pytest.fixture
def small_pyz(tmp_path, monkeypatch):
    # the localrag.py under test goes into the file (bench/mutants.py's copy links tools/, whose ROOT is the repo's)
    monkeypatch.setattr(build_pyz, "ROOT", ROOT)
    host = localrag.pyz_platform_id(sys.platform, __import__("platform").machine())
    py = f"{sys.version_info[0]}.{sys.version_info[1]}"
    layers = {
        "lib/common": {"purepkg/__init__.py": (b"WHERE = 'common'\n", 0o644)},
        f"lib/{host}/shared": {"sharedpkg/__init__.py": (b"X = 1\n", 0o644),
                               "sharedpkg/bin/tool": (TOOL, 0o755)},
        f"lib/{host}/cp{py.replace('.', '')}": {"perpy/__init__.py": (f"PY = {py!r}\n".encode(), 0o644)},
    }
    out = tmp_path / "dir with spaces, ünïcödé" / "localrag-small.pyz"
    build_pyz.write_pyz(out, layers, {host: {"pythons": [py]}}, 1767225600)
    return out


def test_builder_is_deterministic(small_pyz, tmp_path):
    again = tmp_path / "again" / small_pyz.name
    layers = {}
    with zipfile.ZipFile(small_pyz) as zf:
        manifest = json.loads(zf.read("localrag-pyz.json"))
        for info in zf.infolist():
            if info.filename.startswith("lib/"):
                dirname = next(layer["dir"] for layer in manifest["layers"] if info.filename.startswith(layer["dir"]
                                                                                                         + "/"))
                layers.setdefault(dirname, {})[info.filename[len(dirname) + 1:]] = (
                    zf.read(info), 0o755 if (info.external_attr >> 16) & 0o111 else 0o644)
    build_pyz.write_pyz(again, layers, manifest["platforms"], 1767225600)
    assert again.read_bytes() == small_pyz.read_bytes()


def test_boot_unpacks_once_and_reuses(small_pyz, tmp_path):
    root = tmp_path / "unpack ü"
    first = localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})
    assert len(first["layers"]) == 3 and all(Path(p).is_dir() for p in first["layers"])
    tool = next(Path(p) for p in first["layers"] if "shared" in p) / "sharedpkg" / "bin" / "tool"
    assert os.access(tool, os.X_OK)
    before = sorted(p.name for p in root.iterdir())
    again = localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})
    assert again["layers"] == first["layers"] and sorted(p.name for p in root.iterdir()) == before
    assert not [p for p in root.iterdir() if p.name.startswith(".unpack-")]


@pytest.mark.skipif(not hasattr(os, "sync"), reason="no os.sync on this platform")
def test_a_layer_is_on_disk_before_it_takes_its_name(small_pyz, tmp_path, monkeypatch):
    """Each layer is synced while it is still a temporary folder, then renamed: a power cut never leaves a layer
    folder whose files are empty."""
    root = tmp_path / "unpack"
    seen, real_sync = [], os.sync

    def sync():   # the real sync, and what the unpack folder holds at that moment
        real_sync()
        seen.append(sorted(p.name[:8] for p in root.iterdir() if not p.name.startswith(".boot")))

    monkeypatch.setattr(os, "sync", sync)
    layers = localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})["layers"]
    assert len(seen) == len(layers) == 3
    for n, names in enumerate(seen):   # before the n-th sync: n layers renamed, one temporary folder
        assert len([x for x in names if x.startswith(".unpack-")]) == 1 and len(names) == n + 1, seen


def test_two_first_starts_at_once_leave_one_complete_copy(small_pyz, tmp_path):
    root = tmp_path / "unpack"
    results, errors = [], []

    def start():
        try:
            results.append(localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})["layers"])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len({tuple(r) for r in results}) == 1
    assert sorted(p.name for p in root.iterdir() if p.name.startswith(".unpack-")) == []
    shared = next(Path(p) for p in results[0] if "shared" in p)
    assert (shared / "sharedpkg" / "bin" / "tool").read_bytes() == TOOL


def test_damaged_member_is_reported_and_nothing_is_left(small_pyz, tmp_path):
    data = bytearray(small_pyz.read_bytes())
    pos = data.index(b"sharedpkg/bin/tool") + 2000  # inside the compressed body of the 64 KB member
    data[pos:pos + 64] = bytes(64)
    bad = tmp_path / "bad.pyz"
    bad.write_bytes(bytes(data))
    root = tmp_path / "unpack"
    with pytest.raises(localrag.PyzUnusable, match=r"bad.pyz is damaged \(.*\); copy it again .*SHA256SUMS"):
        localrag.pyz_boot(str(bad), {"SHIV_ROOT": str(root)})
    left = [p.name for p in root.iterdir()]
    assert not [n for n in left if "shared" in n or n.startswith(".unpack-")], left  # no half layer, no temp


def test_truncated_file_is_reported(small_pyz, tmp_path):
    bad = tmp_path / "cut.pyz"
    bad.write_bytes(small_pyz.read_bytes()[: small_pyz.stat().st_size // 2])
    with pytest.raises(localrag.PyzUnusable, match="damaged or not a localrag pyz"):
        localrag.pyz_boot(str(bad), {"SHIV_ROOT": str(tmp_path / "u")})


def test_unwritable_unpack_folder_names_shiv_root(small_pyz, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(localrag.PyzUnusable) as err:
        localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(blocker / "unpack")})
    assert "SHIV_ROOT=" in err.value.message and "LOCALRAG_HOME" in err.value.message
    assert err.value.exit_code == 3


def test_bootstrap_refuses_old_python_in_one_line(small_pyz):
    """Also under the name the README gives the file on a laptop, localrag.pyz: localrag.py then sets its stop
    handlers at import (as for `python -m localrag`), and on CPython 3.7 that ended in a traceback
    (`module 'sys' has no attribute 'unraisablehook'`, a 3.8 addition) before the one-line refusal."""
    old = Path(subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip() or "/nonexistent")
    pythons = sorted(old.glob("versions/3.[6-9].*/bin/python3")) if old.is_dir() else []
    if not pythons:
        pytest.skip("no CPython 3.6-3.9 under $(pyenv root)/versions")
    as_named = small_pyz.parent / "localrag.pyz"
    shutil.copyfile(small_pyz, as_named)
    for app in (small_pyz, as_named):
        for python in pythons:
            done = subprocess.run([str(python), str(app), "--version"], capture_output=True, text=True,
                                  env={"PATH": "/usr/bin:/bin", "HOME": str(small_pyz.parent)})
            assert done.returncode == 3, (python, app.name, done.stderr)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and "[platform_unsupported]" in lines[0] and "CPython" in lines[0], lines


def test_later_starts_use_the_boot_stamp_until_the_file_changes(small_pyz, tmp_path):
    root = tmp_path / "unpack"
    first = localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})
    stamps = sorted(root.glob(".boot-*.json"))
    assert len(stamps) == 1 and json.loads(stamps[0].read_text())["layers"] == first["layers"]
    assert localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)}) == first
    st = small_pyz.stat()
    os.utime(small_pyz, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a new copy of the file: checked again
    assert localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})["layers"] == first["layers"]
    assert len(sorted(root.glob(".boot-*.json"))) == 2


def test_later_starts_load_localrag_compiled_once(small_pyz, tmp_path):
    """Issue 15: zipimport compiles localrag.py at every start; the bootstrap keeps the compiled code beside the
    layers (named by the source's hash and the Python), so later starts only load it.  A damaged cache file is
    compiled again and replaced; an unwritable folder is still reported by the unpack step, not the bootstrap."""
    root = tmp_path / "unpack"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SHIV_ROOT": str(root)}

    def version() -> str:
        done = subprocess.run([sys.executable, str(small_pyz), "--version"], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    first = version()
    caches = sorted(root.glob("localrag-*.code"))
    assert len(caches) == 1 and sys.implementation.cache_tag in caches[0].name
    assert version() == first and sorted(root.glob("localrag-*.code")) == caches
    caches[0].write_bytes(b"not marshalled code")
    assert version() == first
    assert caches[0].read_bytes() != b"not marshalled code" and not list(root.glob("*.tmp"))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    env["SHIV_ROOT"] = str(blocker / "unpack")
    done = subprocess.run([sys.executable, str(small_pyz), "--version"], capture_output=True, text=True, env=env)
    # the bootstrap only compiles; the unpack step names the folder, as before: one line, exit 3
    assert done.returncode == 3 and "SHIV_ROOT" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# --- a damaged unpack folder (an outside review: a file deleted there later gave ModuleNotFoundError, or "use the
# pyz for this platform" for a native module, at every start) --------------------------------------------------------

def _layer(facts, part):
    return next(Path(p) for p in facts["layers"] if part in Path(p).name)


@pytest.mark.parametrize("damage, says", [
    (lambda f: f.unlink(), "sharedpkg/bin/tool is missing"),
    (lambda f: f.write_bytes(f.read_bytes()[:100]), "sharedpkg/bin/tool has 100 bytes, not 64,010"),
    (lambda f: f.write_bytes(b"X" + f.read_bytes()[1:]), "sharedpkg/bin/tool was changed after it was unpacked")])
def test_a_damaged_layer_is_noticed_and_unpacked_again(small_pyz, tmp_path, damage, says):
    root = tmp_path / "unpack"
    first = localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})
    tool = _layer(first, "shared") / "sharedpkg" / "bin" / "tool"
    st = tool.stat()
    damage(tool)
    if tool.exists():   # an edit within the same second keeps its size: the mtime must tell
        os.utime(tool, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    trusted = localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)}, check_layers=False)
    assert "repaired" not in trusted   # a later start trusts its layers until the first import (see _pyz_main)
    again = localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})
    assert again["layers"] == first["layers"]
    assert again["repaired"] == [{"layer": str(_layer(first, "shared")), "damage": says}]
    assert tool.read_bytes() == TOOL and os.access(tool, os.X_OK)
    assert sorted(p.name for p in root.iterdir() if p.name.startswith((".unpack-", ".damaged-"))) == []
    assert "repaired" not in localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})   # whole again


def test_a_layer_unpacked_before_the_file_list_existed_is_checked_against_the_zip(small_pyz, tmp_path):
    """Layers unpacked by an earlier version have no file list: their sizes are compared with the zip's once and the
    list written, not the layer unpacked again; a damaged one is replaced."""
    root = tmp_path / "unpack"
    first = localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})
    for p in first["layers"]:
        (Path(p) / localrag.PYZ_LAYER_FILES).unlink()
    tool = _layer(first, "shared") / "sharedpkg" / "bin" / "tool"
    before = tool.stat().st_mtime_ns
    assert "repaired" not in localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})
    assert tool.stat().st_mtime_ns == before and all((Path(p) / localrag.PYZ_LAYER_FILES).is_file()
                                                     for p in first["layers"])
    for p in first["layers"]:
        (Path(p) / localrag.PYZ_LAYER_FILES).unlink()
    (_layer(first, "common") / "purepkg" / "__init__.py").unlink()
    again = localrag.pyz_boot(str(small_pyz), {"SHIV_ROOT": str(root)})
    assert [r["damage"] for r in again["repaired"]] == ["purepkg/__init__.py is missing"]


def test_a_first_start_says_it_unpacks_and_later_starts_say_nothing(small_pyz, tmp_path):
    """A field walkthrough's first `python3 localrag.pyz --help` on a busy machine sat silent for 10 s (unpacking
    and syncing ~50 MB): a first start says what it does, once; later starts print nothing more."""
    root = tmp_path / "unpack"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SHIV_ROOT": str(root)}
    runs = [subprocess.run([sys.executable, str(small_pyz), "--version"], capture_output=True, text=True, env=env)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0] and runs[0].stdout == runs[1].stdout
    size = sum(layer["bytes"] for layer in json.loads(zipfile.ZipFile(small_pyz).read("localrag-pyz.json"))["layers"])
    assert runs[0].stderr == (f"first start of {small_pyz.name} here: unpacking {size / 1e6:.1f} MB of libraries "
                              f"into {root} (once; later starts reuse them)\n")
    assert runs[1].stderr == ""


def test_the_pyz_repairs_its_layers_before_the_first_import_and_help_pays_nothing(small_pyz, tmp_path):
    """Started again after a file of a layer was deleted: `--help` imports nothing and does not look (its start
    budget); a command that imports a module first puts the layer back, with one warning line naming it."""
    root = tmp_path / "unpack"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SHIV_ROOT": str(root)}

    def run(*args):
        return subprocess.run([sys.executable, str(small_pyz), *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path)

    assert run("--version").returncode == 0
    lost = next(root.glob("common-*")) / "purepkg" / "__init__.py"
    lost.unlink()
    helped = run("--help")
    assert helped.returncode == 0 and helped.stderr == "" and not lost.exists()
    done = run("eval", "init", "--questions", str(tmp_path / "q.yaml"))   # imports yaml: the check comes first
    assert done.returncode == 0, done.stderr
    warning = [line for line in done.stderr.splitlines() if "damaged" in line]
    assert warning == [f"warning: the unpacked layer {lost.parent.parent} was damaged (purepkg/__init__.py is "
                       f"missing); unpacked it again from {small_pyz.name}"]
    assert lost.read_text() == "WHERE = 'common'\n"
    assert "damaged" not in run("eval", "init", "--questions", str(tmp_path / "q2.yaml")).stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the signal mask from /proc")
@pytest.mark.parametrize("sig", [2, 15])   # SIGINT, SIGTERM
def test_a_signal_while_the_pyz_starts_is_a_quiet_interruption(small_pyz, tmp_path, sig):
    """Ctrl-C or SIGTERM while the bootstrap loads localrag.py or unpacks (before main() has its handlers): one line,
    128 + signal, no traceback, and no half-unpacked folder left; first starts and later ones alike."""
    from test_cli import signalled_early
    name = {2: "SIGINT", 15: "SIGTERM"}[sig]
    for n, delay_s in enumerate((0, 0.002, 0.005, 0.01, 0.02, 0, 0.005, 0.01)):
        root = tmp_path / ("unpack" if n >= 5 else f"unpack-{n}")   # five first starts, then later ones
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "SHIV_ROOT": str(root)}
        done = signalled_early([sys.executable, str(small_pyz), "--help"], sig, delay_s, env=env, cwd=tmp_path)
        assert (done.returncode, done.stderr, done.stdout) == (128 + sig, f"interrupted ({name})\n", ""), \
            (delay_s, done.stderr)
        assert not [p for p in root.glob(".unpack-*")] if root.exists() else True


def test_pyz_main_checks_the_layers_at_the_first_import_in_process(small_pyz, tmp_path, monkeypatch, capsys):
    """_pyz_main (in this process): a later start puts the check in front of every finder; the first import (here
    the layer's own purepkg) repairs the layer before the module is loaded, says so once, and steps aside."""
    root = tmp_path / "unpack"
    monkeypatch.setenv("SHIV_ROOT", str(root))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    first = localrag.pyz_boot(str(small_pyz))
    lost = _layer(first, "common") / "purepkg" / "__init__.py"
    lost.unlink()
    assert localrag._pyz_main(str(small_pyz), ["--version"]) == 0 and not lost.exists()   # nothing imported yet
    try:
        import purepkg   # noqa: F401 - the first import after start-up
        assert purepkg.WHERE == "common" and lost.is_file()
    finally:
        sys.modules.pop("purepkg", None)
    assert capsys.readouterr().err.count("was damaged (purepkg/__init__.py is missing)") == 1
    assert not [f for f in sys.meta_path if isinstance(f, localrag._PyzLayerCheck)]
