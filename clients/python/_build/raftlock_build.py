"""A PEP 517 build backend for this one pure-Python package, standard library only.

It exists so that `pip install ./clients/python` works on a machine with only
python3 and pip and no network: a backend that pip must first download
(setuptools in an isolated build environment, flit_core, hatchling) cannot be
had offline. It builds a py3-none-any wheel of src/raftlock, an editable wheel
(a .pth file pointing at src/), and an sdist, with the metadata of
pyproject.toml's [project] table.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _dist(p: dict) -> str:
    return f"{p['name'].replace('-', '_')}-{p['version']}"


def _metadata(p: dict) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {p['name']}",
        f"Version: {p['version']}",
        f"Summary: {p.get('description', '')}",
        f"Requires-Python: {p.get('requires-python', '')}",
    ]
    lines += [f"Classifier: {c}" for c in p.get("classifiers", [])]
    lines += [f"Requires-Dist: {d}" for d in p.get("dependencies", [])]
    readme = ROOT / p.get("readme", "README.md")
    if readme.exists():
        lines.append("Description-Content-Type: text/markdown")
        return "\n".join(lines) + "\n\n" + readme.read_text(encoding="utf-8")
    return "\n".join(lines) + "\n"


def _package_files() -> list[Path]:
    return sorted(
        f for f in (SRC / "raftlock").rglob("*")
        if f.is_file() and "__pycache__" not in f.parts and f.suffix in (".py", ".typed")
    )


class _Wheel:
    def __init__(self, path: Path) -> None:
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.record: list[str] = []

    def add(self, arcname: str, data: bytes) -> None:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.record.append(f"{arcname},sha256={digest},{len(data)}")
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)

    def close(self, dist_info: str) -> None:
        self.record.append(f"{dist_info}/RECORD,,")
        info = zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        self.zip.writestr(info, "\n".join(self.record) + "\n")
        self.zip.close()


def _build(wheel_directory: str, editable: bool) -> str:
    p = _project()
    dist = _dist(p)
    name = f"{dist}-py3-none-any.whl"
    w = _Wheel(Path(wheel_directory) / name)
    if editable:
        w.add(f"{dist}.pth", (str(SRC) + "\n").encode())
    else:
        for f in _package_files():
            w.add(f.relative_to(SRC).as_posix(), f.read_bytes())
    dist_info = f"{dist}.dist-info"
    w.add(f"{dist_info}/METADATA", _metadata(p).encode())
    w.add(f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: raftlock_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    w.close(dist_info)
    return name


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: dict | None = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None) -> str:
    return _build(wheel_directory, editable=False)


def build_editable(wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None) -> str:
    return _build(wheel_directory, editable=True)


def build_sdist(sdist_directory: str, config_settings: dict | None = None) -> str:
    p = _project()
    dist = _dist(p)
    name = f"{dist}.tar.gz"
    files = [ROOT / "pyproject.toml", ROOT / "README.md", Path(__file__).resolve(), *_package_files()]
    with tarfile.open(Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for f in files:
            if f.exists():
                tar.add(f, arcname=f"{dist}/{f.relative_to(ROOT).as_posix()}", recursive=False)
        data = _metadata(p).encode()
        info = tarfile.TarInfo(f"{dist}/PKG-INFO")
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    return name


