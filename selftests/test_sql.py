"""The one connect helper: timeouts always set, failures say where, never the password."""

import socket

import mysql.connector
import pytest

from wanbench.errors import InfrastructureError
from wanbench.sql import connect


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns: nothing listens there


def test_a_failure_names_who_and_where_without_the_password() -> None:
    port = closed_port()
    with pytest.raises(InfrastructureError) as info:
        connect(host="127.0.0.1", port=port, user="bench", password="pa55word-secret", timeout=2, who="probe setup")
    text = str(info.value)
    assert text.startswith(f"probe setup: cannot connect to bench@127.0.0.1:{port}: ")
    assert "pa55word-secret" not in text


def test_without_who_the_connector_error_reaches_the_caller() -> None:
    with pytest.raises(mysql.connector.Error):
        connect(host="127.0.0.1", port=closed_port(), user="bench", password="x", timeout=1)
