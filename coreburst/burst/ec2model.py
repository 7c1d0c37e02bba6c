"""EC2's service model cut to the calls the power programs make, kept on disk between runs.

slurmctld starts the resume program for every resume, and botocore reads EC2's whole service
model (about 700 operations, several MB of JSON) and builds a client method for each before the
first call: about 0.1 s of CPU of the 0.3 s a plain resume may spend before its first AWS call
(issue 33 item 5). :class:`CutLoader` is botocore's own loader (``botocore.loaders.Loader``,
registered as the session's ``data_loader`` component, as botocore documents for custom
loaders) that answers EC2's model with only :data:`OPERATIONS` and the shapes they reach, its
paginators with theirs, and its endpoint rules as they are. The cut is made once from the
installed botocore's own files and written beside the power programs' claims as plain JSON,
named with botocore's version (a botocore upgrade makes a new one); an unreadable or
unwritable cache only costs the full load.

    >>> session = botocore.session.get_session()  # doctest: +SKIP
    >>> loader = CutLoader(Path("/var/lib/coreburst"))  # doctest: +SKIP
    >>> session.register_component("data_loader", loader)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import botocore
from botocore.loaders import Loader

# Every EC2 operation the power programs call (coreburst/burst/launch.py, ec2io.py; a test
# reads them from the source and checks this set holds them all).
OPERATIONS = frozenset(
    {
        "CreateFleet",
        "CreateTags",
        "DescribeInstances",
        "DescribeLaunchTemplates",
        "DescribeSubnets",
        "TerminateInstances",
    }
)
CACHED = ("service-2", "paginators-1", "endpoint-rule-set-1")


def _shape_refs(shape: dict[str, Any]) -> list[str]:
    refs = [m["shape"] for m in shape.get("members", {}).values()]
    for key in ("member", "key", "value"):
        if key in shape:
            refs.append(shape[key]["shape"])
    return refs


def cut(model: dict[str, Any], operations: frozenset[str] = OPERATIONS) -> dict[str, Any]:
    """``model`` (a service-2 document) with only ``operations`` and the shapes they reach;
    documentation strings dropped (nothing at run time reads them)."""
    ops = {name: op for name, op in model["operations"].items() if name in operations}
    todo = [
        ref["shape"]
        for op in ops.values()
        for ref in (op.get("input"), op.get("output"), *op.get("errors", []))
        if ref
    ]
    shapes: dict[str, Any] = {}
    while todo:
        name = todo.pop()
        if name in shapes:
            continue
        shape = {k: v for k, v in model["shapes"][name].items() if k != "documentation"}
        if "members" in shape:
            shape["members"] = {
                m: {k: v for k, v in ref.items() if k != "documentation"}
                for m, ref in shape["members"].items()
            }
        shapes[name] = shape
        todo += _shape_refs(shape)
    ops = {n: {k: v for k, v in op.items() if k != "documentation"} for n, op in ops.items()}
    return {**model, "operations": ops, "shapes": shapes}


class CutLoader(Loader):
    """botocore's Loader, with EC2's models cut to :data:`OPERATIONS` and cached in
    ``cache_dir``."""

    def __init__(self, cache_dir: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cache_dir = cache_dir

    def _cache_path(self, type_name: str) -> Path:
        return self.cache_dir / f"botocore-{botocore.__version__}-ec2-{type_name}.json"

    def load_service_model(
        self, service_name: str, type_name: str, api_version: str | None = None
    ) -> Any:
        # (botocore ships one EC2 API version: its own version names the cache.)
        if service_name != "ec2" or type_name not in CACHED:
            return super().load_service_model(service_name, type_name, api_version)
        path = self._cache_path(type_name)
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_bytes())
        data = super().load_service_model(service_name, type_name, api_version)
        if type_name == "service-2":
            data = cut(data)
        elif type_name == "paginators-1":
            data = {
                **data,
                "pagination": {
                    k: v for k, v in data.get("pagination", {}).items() if k in OPERATIONS
                },
            }
        self._write(path, data)
        return data

    def load_data_with_path(self, name: str) -> Any:
        """``endpoints`` (every service's endpoints in every partition, read by botocore's
        endpoint resolver at client creation) with EC2's alone, and the path of botocore's
        own file (it is what this is cut from); the rest as botocore has it."""
        if name != "endpoints":
            return super().load_data_with_path(name)
        path = self._cache_path(name)
        builtin = os.path.join(self.BUILTIN_DATA_PATH, name)
        with contextlib.suppress(OSError, ValueError):
            return json.loads(path.read_bytes()), builtin
        data, found = super().load_data_with_path(name)
        if not self.is_builtin_path(found):  # someone's own endpoints: used as they are
            return data, found
        data = {
            **data,
            "partitions": [
                {**p, "services": {k: v for k, v in p.get("services", {}).items() if k == "ec2"}}
                for p in data.get("partitions", [])
            ],
        }
        self._write(path, data)
        return data, found

    def _write(self, path: Path, data: Any) -> None:
        with contextlib.suppress(OSError):  # no cache: the next run loads the full model too
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=f".{path.name}.")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(data, f, separators=(",", ":"))
                os.replace(tmp, path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)


def session(cache_dir: Path) -> Any:
    """A botocore session (this process's environment and config files, as boto3 would make)
    loading EC2's model cut and cached in ``cache_dir``; botocore's own loader when the
    environment names model directories of its own (``AWS_DATA_PATH``)."""
    import botocore.session

    s = botocore.session.get_session()
    if not s.get_config_variable("data_path"):
        s.register_component("data_loader", CutLoader(cache_dir))
    return s
