#!/usr/bin/env python3
"""Re-fetch the GraphiQL page's assets from npm at the pinned versions below into
src/chatgql/static/graphiql/, and record versions, licenses and sha256 in manifest.json.

chatgql serves these files itself (graphql/graphiql.py), so GraphiQL works without
internet. To upgrade: change PACKAGES, run this script (needs npm), check the page in
a browser (tests/clients/test_graphiql_browser.py), commit the files and the manifest.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "chatgql" / "static" / "graphiql"

# package, version, {file in the package: name it is served as}. All MIT-licensed.
PACKAGES = [
    ("react", "18.2.0", {"umd/react.production.min.js": "react-18.2.0.production.min.js"}),
    ("react-dom", "18.2.0", {"umd/react-dom.production.min.js": "react-dom-18.2.0.production.min.js"}),
    # graphiql's UMD build bundles @graphiql/react, @graphiql/toolkit, graphql and graphql-ws.
    ("graphiql", "3.8.3", {"graphiql.min.js": "graphiql-3.8.3.min.js", "graphiql.min.css": "graphiql-3.8.3.min.css"}),
    (
        "@graphiql/plugin-explorer",
        "1.0.2",
        {"dist/index.umd.js": "plugin-explorer-1.0.2.umd.js", "dist/style.css": "plugin-explorer-1.0.2.css"},
    ),
]
# Source maps are not shipped: a reference to one would be a request that 404s.
SOURCE_MAP = re.compile(rb"\n?(//|/\*)# sourceMappingURL=[^\n]*$")


def pack(package: str, version: str, workdir: Path) -> tuple[Path, dict]:
    out = subprocess.run(
        ["npm", "pack", "--json", "--pack-destination", str(workdir), f"{package}@{version}"],
        check=True,
        capture_output=True,
        text=True,
        cwd=workdir,
    ).stdout
    info = json.loads(out)[0]
    return workdir / info["filename"], info


def main() -> int:
    manifest: dict = {"packages": [], "files": {}}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        staged = workdir / "out"
        staged.mkdir()
        licenses = []
        for package, version, files in PACKAGES:
            tarball, info = pack(package, version, workdir)
            with tarfile.open(tarball) as tar:
                package_json = json.load(tar.extractfile("package/package.json"))
                license_text = None
                if "package/LICENSE" in tar.getnames():
                    license_text = tar.extractfile("package/LICENSE").read().decode()
                for inside, served in files.items():
                    data = tar.extractfile(f"package/{inside}").read()
                    data = SOURCE_MAP.sub(b"", data.rstrip()) + b"\n"
                    (staged / served).write_bytes(data)
                    manifest["files"][served] = {
                        "package": package,
                        "path": inside,
                        "sha256": hashlib.sha256(data).hexdigest(),
                        "bytes": len(data),
                    }
            if package_json.get("license") != "MIT":
                print(f"{package}@{version}: license {package_json.get('license')!r}, not MIT", file=sys.stderr)
                return 1
            manifest["packages"].append(
                {"name": package, "version": version, "license": "MIT", "integrity": info["integrity"]}
            )
            licenses.append(
                f"{package}@{version} (MIT)\n\n"
                + (license_text or "The package ships no LICENSE file; its package.json says MIT.\n")
            )
        (staged / "LICENSES.txt").write_text(("\n" + "=" * 72 + "\n\n").join(licenses))
        (staged / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        keep = {"index.html"}  # the page is chatgql's own
        for old in OUT.glob("*"):
            if old.name not in keep:
                old.unlink()
        OUT.mkdir(parents=True, exist_ok=True)
        for new in staged.iterdir():
            shutil.copy(new, OUT / new.name)
    total = sum(entry["bytes"] for entry in manifest["files"].values())
    print(f"{len(manifest['files'])} files, {total / 1e6:.1f} MB, in {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
