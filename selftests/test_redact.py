"""The one redactor: every secret masked the same way, empty ones ignored."""

from wanbench.redact import MASK, hide, redactor
from wanbench.workloads.sysproc import option_redactor


def test_every_secret_is_masked_and_empty_ones_change_nothing() -> None:
    assert hide("user=bench password=s3cret host=h", ["s3cret", "", None]) == f"user=bench password={MASK} host=h"
    assert hide("nothing to hide", []) == "nothing to hide"


def test_a_redactor_keeps_the_secrets_it_was_made_with() -> None:
    secrets = ["pw1"]
    redact = redactor(secrets)
    secrets.append("pw2")
    assert redact("pw1 pw2") == f"{MASK} pw2"


def test_option_lines_hide_their_values_only() -> None:
    redact = option_redactor(["mysql-password=hunter22", "mysql-user="])
    assert redact("--mysql-password=hunter22 --mysql-user=x") == f"--mysql-password={MASK} --mysql-user=x"
