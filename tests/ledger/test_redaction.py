"""DSN passwords never reach a message: every way a ledger URL can carry one, and libpq's
error text for URLs it could not use (it quotes the values). The errors are psycopg's own,
from a connect attempt to a closed local port (nothing listens; no server is needed)."""
from __future__ import annotations

import psycopg
import pytest

from offload.ledger.postgres.errors import classify
from offload.ledger.postgres.errors import redact as location
from offload.ledger.redaction import redact, scrub

pytestmark = pytest.mark.timeout(60)
SECRET = "s3cr3tPW"


@pytest.mark.parametrize("url,shown", [
    (f"postgresql://bob:{SECRET}@host:5432/db", "postgresql://bob:***@host:5432/db"),
    (f"postgresql://bob@host/db?password={SECRET}", "postgresql://bob@host/db?password=***"),
    (f"postgresql://bob@host/db?sslmode=disable&password={SECRET}&x=1", "postgresql://bob@host/db?sslmode=disable&password=***&x=1"),
    (f"postgresql://bob@host/db?sslpassword={SECRET}", "postgresql://bob@host/db?sslpassword=***"),
    (f"postgresql://bob:pa/ss{SECRET}@host/db", "postgresql://bob:***@host/db"),  # unencoded /
    (f"postgresql://bob:p@ss?w#{SECRET}@host/db", "postgresql://bob:***@host/db"),  # unencoded @ ? #
    (f"postgresql://bob:{SECRET}%zz@host/db", "postgresql://bob:***@host/db"),  # malformed encoding
    (f"host=h user=bob password={SECRET}", "host=h user=bob password=***"),
    (f"host=h password='{SECRET} x' user=bob", "host=h password=*** user=bob"),
    (f"host=h password {SECRET}", "host=h password ***"),  # malformed key=value
    ("postgresql://bob@host/db", "postgresql://bob@host/db"),
    ("/srv/state.db", "/srv/state.db"),
])
def test_redact_hides_every_way_a_password_is_written(url: str, shown: str) -> None:
    assert redact(url) == shown and SECRET not in redact(url)


@pytest.mark.parametrize("url", [
    f"postgresql://bob:{SECRET}@127.0.0.1:1/db",
    f"postgresql://bob@127.0.0.1:1/db?password={SECRET}",
    f"postgresql://bob:{SECRET}%zz@127.0.0.1:1/db",
    f"postgresql://bob:p@ss?w#{SECRET}@127.0.0.1:1/db",
    f"postgresql://bob:{SECRET}@127.0.0.1:notaport/db",
    f"postgresql://bob:{SECRET}@127.0.0.1:1/db?sslmode={SECRET}",
    f"host=127.0.0.1 port=1 password={SECRET}",
    f"host=127.0.0.1 port=1 password {SECRET}",
])
def test_libpqs_error_text_is_scrubbed_of_the_password(url: str) -> None:
    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.Error as exc:
        error = classify(location(url), exc, url)  # as PostgresConnections names it
    else:
        pytest.fail("a closed port accepted a connection")
    assert SECRET[2:6] not in str(error), str(error)  # not whole, nor a piece


def test_scrub_masks_pieces_libpq_quotes_of_a_password_it_split() -> None:
    url = "postgresql://bob:p@ss?w#rd@127.0.0.1:1/db"
    said = 'missing key/value separator "=" in URI query parameter: "w#rd@127.0.0.1:1/db"'
    assert scrub(said, url) == 'missing key/value separator "=" in URI query parameter: "***"'
    assert scrub('password authentication failed for user "bob"', url) == \
        'password authentication failed for user "bob"'  # the cause stays readable
