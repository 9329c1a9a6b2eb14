"""The TOML config: every mistake is an error that names the key."""

import pytest

from tb_crash_signals.analysis.config import ConfigError, config_for_logdir, load_config


def write(tmp_path, text, name="crash_signals.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_full_config_is_applied(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            """
select = ["CS1", "CS2"]
ignore = ["CS111"]
[signals]
train_loss = "my/loss"
grad_norm = ["a", "b"]
[rules.grad-norm-threshold]
threshold = 50
severity = "warning"
[rules.CS112]
min_ratio = 8.0
""",
        )
    )
    assert cfg.signals == {"train_loss": ("my/loss",), "grad_norm": ("a", "b")}
    assert cfg.params_for("CS101").threshold == 50.0
    assert isinstance(cfg.params_for("CS101").threshold, float)
    assert cfg.severity_for("CS101") == "warning"
    assert cfg.params_for("CS112").min_ratio == 8.0
    enabled = cfg.enabled_codes()
    assert "CS101" in enabled and "CS201" in enabled
    assert "CS111" not in enabled and "CS001" not in enabled


@pytest.mark.parametrize(
    "text, key",
    [
        ("bogus = 1", "bogus"),
        ("[signals]\ntrain_los = 'x'", "signals.train_los"),
        ("[signals]\ntrain_loss = 3", "signals.train_loss"),
        ("[rules.no-such-rule]\nx = 1", "rules.no-such-rule"),
        ("[rules.grad-norm-threshold]\nthreshhold = 1", "rules.grad-norm-threshold.threshhold"),
        ("[rules.grad-norm-threshold]\nthreshold = 'high'", "rules.grad-norm-threshold.threshold"),
        ("[rules.loss-spike]\nwindow = 2.5", "rules.loss-spike.window"),
        ("[rules.loss-spike]\nwindow = -3", "rules.loss-spike.window"),
        ("[rules.CS101]\nseverity = 'fatal'", "rules.CS101.severity"),
        ("select = ['CS9']", "select"),
        ("select = 'CS1'", "select"),
        ("this is not toml", "invalid TOML"),
    ],
)
def test_bad_config_names_the_key(tmp_path, text, key):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert key in str(err.value)
    assert str(err.value).startswith("crash_signals.toml: ")


def test_logdir_config_is_found_and_explicit_wins(tmp_path):
    assert config_for_logdir(str(tmp_path)).path is None
    write(tmp_path, "[rules.CS101]\nthreshold = 10.0")
    assert config_for_logdir(str(tmp_path)).params_for("CS101").threshold == 10.0
    other = write(tmp_path, "[rules.CS101]\nthreshold = 20.0", name="other.toml")
    assert config_for_logdir(str(tmp_path), other).params_for("CS101").threshold == 20.0


def test_unreadable_config_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.toml"))
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError):
        load_config(str(tmp_path / "bin.toml"))
