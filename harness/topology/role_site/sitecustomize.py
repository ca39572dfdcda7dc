"""Put at the head of a role's PYTHONPATH by the harness when it runs a Dynamo checkout
(`--dynamo-src`): records which file each `dynamo.<package>` is loaded from, so the harness can
prove the checkout's code ran in that role. One JSON line per package, written the moment it is
imported, to $HARNESS_IMPORT_RECORDS/<pid>.jsonl. It changes nothing the role imports."""

import importlib.machinery
import json
import os
import sys


class DynamoImportRecorder:
    """A meta-path finder that finds nothing itself: it looks where the path finder will load a
    `dynamo.<package>` from, writes that down and lets the import proceed."""

    def __init__(self, out_dir: str) -> None:
        self.out = os.path.join(out_dir, f"{os.getpid()}.jsonl")
        self.seen: set[str] = set()

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name.count(".") != 1 or not name.startswith("dynamo.") or name in self.seen:
            return None
        self.seen.add(name)
        spec = importlib.machinery.PathFinder.find_spec(name, path)  # type: ignore[arg-type]
        record = {"pid": os.getpid(), "module": name, "file": spec.origin if spec else None}
        try:
            with open(self.out, "a") as out:
                out.write(json.dumps(record) + "\n")
        except OSError:
            pass  # a missing record is reported by the harness, naming the role
        return None


_records = os.environ.get("HARNESS_IMPORT_RECORDS")
if _records:
    os.makedirs(_records, exist_ok=True)
    sys.meta_path.insert(0, DynamoImportRecorder(_records))
