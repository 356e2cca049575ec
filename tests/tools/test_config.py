"""Loading kgc's configuration: Java properties syntax, Kafka's names and precedence, and what
is reported at start (ignored, unknown, deprecated names; the effective configuration).

Unit tests of ``coordinator.config.load`` (flags, environment, properties file);
test_config_serve.py starts ``kgc serve`` from a stock Kafka ``server.properties``.
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import pytest

from coordinator import config
from coordinator.config import Settings, load_properties, startup_report


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("KGC_"):
            monkeypatch.delenv(name)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    return parser.parse_args(list(argv))


def load_file(tmp_path: Path, text: str, *argv: str) -> Settings:
    props = tmp_path / "server.properties"
    props.write_text(text, encoding="utf-8")
    return config.load(parse("--config", str(props), *argv))


def refused(tmp_path: Path, text: str, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        load_file(tmp_path, text, *argv)
    assert isinstance(exc.value.code, str)
    assert len(exc.value.code.splitlines()) == 1, exc.value.code
    return exc.value.code


def report(settings: Settings) -> dict[str, str]:
    """startup_report's lines by their first words."""
    out: dict[str, str] = {}
    for _level, line in startup_report(settings):
        out[line.split(":", 1)[0]] = line
    return out


# ---------------------------------------------------------------- Java properties syntax


def test_every_java_properties_form_is_read(tmp_path: Path) -> None:
    path = tmp_path / "p.properties"
    path.write_text(
        "# a comment\n"
        "! another comment\n"
        "num.partitions 3\n"  # key value
        "group.max.size:10\n"  # key:value
        "  offsets.topic.num.partitions   =   7   \n"  # spaces around, trailing trimmed
        "super.users=User:admin;\\\n"  # a continuation line
        "      User:ops\n"
        "cluster.id=k\\u00e9gc\\tid\n"  # \uXXXX and \t escapes
        "broker.rack=rack\\=1\\:a\\\\b\n"  # escaped separators and backslash
        "key\\ with\\ spaces=v\n"  # escaped spaces in a key
        "empty.value=\n"
        "num.partitions=4\n",  # the last of a repeated key wins, as in Java
        encoding="utf-8",
    )
    props = load_properties(path)
    assert props["num.partitions"] == "4"
    assert props["group.max.size"] == "10"
    assert props["offsets.topic.num.partitions"].strip() == "7"
    assert props["super.users"] == "User:admin;User:ops"
    assert props["cluster.id"] == "k\u00e9gc\tid"
    assert props["broker.rack"] == "rack=1:a\\b"
    assert props["key with spaces"] == "v"
    assert props["empty.value"] == ""
    assert not any(k.startswith(("#", "!")) for k in props)


def test_settings_from_every_syntax(tmp_path: Path) -> None:
    s = load_file(
        tmp_path,
        "num.partitions 3\ngroup.max.size: 10\noffsets.topic.num.partitions = 7 \n"
        "super.users=User:admin;\\\n    User:ops\ncluster.id=k\\u00e9gc\n",
    )
    assert (s.num_partitions, s.group_max_size, s.offsets_topic_num_partitions) == (3, 10, 7)
    assert s.super_users == "User:admin;User:ops"
    assert s.cluster_id == "k\u00e9gc"


def test_a_latin1_file_is_read(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_bytes("cluster.id=k\u00e9gc\n".encode("latin-1"))  # not UTF-8
    assert config.load(parse("--config", str(props))).cluster_id == "k\u00e9gc"


# ---------------------------------------------------------------- Kafka's names and precedence


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("log.retention.hours=5\n", 5 * 3_600_000),
        ("log.retention.hours=5\nlog.retention.minutes=7\n", 7 * 60_000),
        ("log.retention.hours=5\nlog.retention.minutes=7\nlog.retention.ms=1234\n", 1234),
        ("log.retention.hours=-1\n", -1),
        ("log.retention.minutes=-5\n", -1),  # any negative: unlimited, as Kafka reads it
        ("", 604_800_000),
    ],
)
def test_retention_synonyms_in_kafkas_precedence(tmp_path: Path, text: str, expected: int) -> None:
    assert load_file(tmp_path, text).log_retention_ms == expected


def test_roll_hours_and_roll_ms(tmp_path: Path) -> None:
    assert load_file(tmp_path, "log.roll.hours=2\n").log_roll_ms == 7_200_000
    assert load_file(tmp_path, "log.roll.hours=2\nlog.roll.ms=500\n").log_roll_ms == 500
    assert "log.roll.hours" in refused(tmp_path, "log.roll.hours=0\n")


def test_log_dirs_is_the_data_directory(tmp_path: Path) -> None:
    assert load_file(tmp_path, "log.dir=/var/a\n").data_dir == Path("/var/a")
    assert load_file(tmp_path, "log.dir=/var/a\nlog.dirs=/var/b\n").data_dir == Path("/var/b")
    s = load_file(tmp_path, "log.dirs= /var/b , /var/c\n")
    assert s.data_dir == Path("/var/b")
    (warning,) = [ln for ln in report(s).values() if ln.startswith("log.dirs names 2")]
    assert "/var/b" in warning and "/var/c" in warning
    # kgc's own name wins in the file; the environment and flags win over the file.
    assert load_file(tmp_path, "log.dirs=/var/b\ndata.dir=/var/d\n").data_dir == Path("/var/d")


def test_sources_strongest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = "log.dirs=/from/file\nnum.partitions=2\n"
    monkeypatch.setenv("KGC_DATA_DIR", "/from/env")
    monkeypatch.setenv("KGC_NUM_PARTITIONS", "5")
    s = load_file(tmp_path, text, "--num-partitions", "9")
    assert (s.data_dir, s.num_partitions) == (Path("/from/env"), 9)


def test_broker_id_is_node_id(tmp_path: Path) -> None:
    assert load_file(tmp_path, "broker.id=3\n").node_id == 3
    assert load_file(tmp_path, "broker.id=3\nnode.id=3\n").node_id == 3
    assert "node.id must be the same as broker.id" in refused(tmp_path, "broker.id=3\nnode.id=4\n")


def test_invalid_values_name_the_setting_as_written(tmp_path: Path) -> None:
    assert refused(tmp_path, "broker.id=x\n").startswith("invalid setting broker.id:")
    assert refused(tmp_path, "log.retention.hours=1.5\n").startswith(
        "invalid setting log.retention.hours:"
    )
    assert refused(tmp_path, "log.retention.minutes=99999999999\n").startswith(
        "invalid setting log.retention.minutes:"
    )
    assert refused(tmp_path, "log.level=LOUD\n").startswith("invalid setting log.level:")
    assert refused(tmp_path, "kgc.log.level=LOUD\n").startswith("invalid setting kgc.log.level:")
    assert refused(tmp_path, "num.partitions=0\n").startswith("invalid setting num.partitions:")


def test_controller_listeners_are_not_bound(tmp_path: Path) -> None:
    s = load_file(
        tmp_path,
        "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\n"
        "advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093\n"
        "controller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n",
    )
    assert [spec.name for spec in s.listener_specs] == ["PLAINTEXT"]
    assert s.advertised_listeners == "PLAINTEXT://localhost:9092"
    assert any("not bound" in line for line in report(s).values())
    assert "controller.listener.names" in refused(
        tmp_path,
        "listeners=CONTROLLER://:9093\ncontroller.listener.names=CONTROLLER\n"
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT\n",
    )


# ---------------------------------------------------------------- what is reported at start


def test_ignored_and_unknown_settings_are_one_line_each(tmp_path: Path) -> None:
    s = load_file(
        tmp_path,
        "num.network.threads=3\nnum.io.threads=8\ncontroller.quorum.voters=1@localhost:9093\n"
        "zookeeper.connect=localhost:2181\nsocket.send.buffer.bytes=102400\n"
        "group.max.sise=3\nnum.partitons=2\n",
    )
    lines = report(s)
    ignored = lines["Kafka settings ignored (they mean nothing for kgc)"]
    for name in (
        "num.network.threads",
        "num.io.threads",
        "controller.quorum.voters",
        "zookeeper.connect",
        "socket.send.buffer.bytes",
    ):
        assert name in ignored
    unknown = lines["unknown settings in the properties file, not used"]
    assert "group.max.sise" in unknown and "num.partitons" in unknown
    assert "group.max.sise" not in ignored
    assert s.group_max_size == Settings.model_fields["group_max_size"].default


def test_old_names_are_accepted_with_one_deprecation_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = load_file(tmp_path, "log.format=json\nlog.level=DEBUG\n")
    assert (s.kgc_log_format, s.kgc_log_level) == ("json", "DEBUG")
    line = report(s)["deprecated names, still accepted"]
    assert "log.format (now kgc.log.format)" in line and "log.level (now kgc.log.level)" in line

    monkeypatch.setenv("KGC_LOG_FORMAT", "json")
    s = config.load(parse("--log-level", "WARNING"))
    assert (s.kgc_log_format, s.kgc_log_level) == ("json", "WARNING")
    line = report(s)["deprecated names, still accepted"]
    assert "--log-level (now --kgc-log-level)" in line
    assert "KGC_LOG_FORMAT (now KGC_KGC_LOG_FORMAT)" in line
    # The new names win over the old ones, wherever each is given.
    monkeypatch.setenv("KGC_KGC_LOG_FORMAT", "text")
    s = config.load(parse("--log-level", "WARNING", "--kgc-log-level", "ERROR"))
    assert (s.kgc_log_format, s.kgc_log_level) == ("text", "ERROR")
    s = load_file(tmp_path, "log.level=DEBUG\nkgc.log.level=ERROR\n")
    assert s.kgc_log_level == "ERROR"


def test_unknown_kgc_environment_variables_are_warned_about(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KGC_GROUP_MAX_SISE", "3")
    monkeypatch.setenv("KGC_LOG_DIRS", "/x")
    monkeypatch.setenv("KGC_NUM_IO_THREADS", "8")
    monkeypatch.setenv("KGC_BOOTSTRAP_SERVER", "localhost:9092")  # the operator commands'
    monkeypatch.setenv("KGC_NUM_PARTITIONS", "4")
    s = config.load(parse())
    line = report(s)["unknown KGC_* environment variables, not used"]
    assert "KGC_GROUP_MAX_SISE" in line
    assert "KGC_LOG_DIRS (in the environment it is KGC_DATA_DIR)" in line
    assert "KGC_NUM_IO_THREADS (num.io.threads means nothing for kgc)" in line
    assert "KGC_BOOTSTRAP_SERVER" not in line and "KGC_NUM_PARTITIONS" not in line
    assert s.num_partitions == 4


def test_nothing_to_report_but_the_configuration(tmp_path: Path) -> None:
    s = load_file(tmp_path, "num.partitions=3\n")
    lines = startup_report(s)
    assert len(lines) == 1
    assert lines[0] == (
        logging.INFO,
        "configuration (settings other than their defaults): num.partitions=3",
    )


def test_effective_configuration_hides_secrets(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = load_file(
        tmp_path,
        "listeners=SASL_SSL://127.0.0.1:9093\n"
        "ssl.keystore.type=PEM\n"
        "ssl.keystore.location=/etc/kgc/server.pem\n"
        "ssl.keystore.password=ks-s3cret\n"
        "ssl.key.password=key-s3cret\n"
        "ssl.keystore.key=-----BEGIN PRIVATE KEY-----inline-s3cret\n"
        "ssl.truststore.password=ts-s3cret\n"
        "sasl.enabled.mechanisms=PLAIN\n"
        'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="jaas-s3cret";\n'
        'listener.name.sasl_ssl.plain.sasl.jaas.config=x required user_bob="scoped-s3cret";\n'
        "storage.url=postgresql://kgc:db-s3cret@db.example/kgc\n",
    )
    with caplog.at_level(logging.INFO, logger="kgc.config"):
        config.log_startup(s)
    text = caplog.text
    assert "s3cret" not in text
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("configuration")]
    assert "listeners=SASL_SSL://127.0.0.1:9093" in line
    assert "ssl.keystore.location=/etc/kgc/server.pem" in line
    assert "ssl.keystore.password=[hidden]" in line
    assert "sasl.jaas.config=[hidden]" in line
    assert "listener.name.sasl_ssl.plain.sasl.jaas.config=[hidden]" in line
    assert "storage.url=postgresql://kgc:***@db.example/kgc" in line
    assert "num.partitions" not in line  # a default is not repeated
