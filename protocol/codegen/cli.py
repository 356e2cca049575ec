"""``python -m protocol.codegen``: write (or ``--check``) every generated codec.

How this works: ``apis.generate`` gives the wire messages (``protocol/messages``,
``protocol/errors.py``) and ``records.generate_records`` the coordinator records
(``storage/records/messages``), each as path -> text; the CLI writes the files whose text
changed, or with ``--check`` exits 1 naming them (a test runs it). The two import options
refresh the stored schemas first: Kafka 3.9's field lists of the versions Kafka 4 dropped,
and the record schemas of Kafka's coordinator jars.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from protocol.codegen.apis import generate
from protocol.codegen.records import KAFKA_VERSION, generate_records, import_records
from protocol.codegen.schema import KAFKA_39_REF, import_kafka_39


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed output is stale")
    ap.add_argument(
        "--import-kafka-3.9",
        dest="kafka_repo",
        type=Path,
        metavar="KAFKA_GIT_DIR",
        help=f"first write protocol/schemas/kafka-3.9 from a Kafka git repo (commit {KAFKA_39_REF[:12]})",
    )
    ap.add_argument(
        "--import-records",
        dest="maven_repo",
        type=Path,
        metavar="MAVEN_REPO",
        help=(
            "first copy protocol/schemas/records from Kafka's coordinator jars"
            f" ({KAFKA_VERSION}) in a Maven repository, e.g. ~/.m2/repository"
        ),
    )
    args = ap.parse_args(argv)
    if args.kafka_repo is not None:
        for p in import_kafka_39(args.kafka_repo):
            print(f"wrote {p}")
    if args.maven_repo is not None:
        for p in import_records(args.maven_repo.expanduser()):
            print(f"wrote {p}")
    files = {**generate(), **generate_records()}
    stale = [p for p, text in files.items() if not p.exists() or p.read_text() != text]
    if args.check:
        for p in stale:
            print(f"stale: {p}", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(files[p])
        print(f"wrote {p}")
    return 0
