"""Ed25519 keys in a PKCS#11 token (SoftHSM2 in tests, an HSM in production): open, sign, make,
import, change the PIN (issue 28).

The key is made in the token non-extractable (``CKA_EXTRACTABLE`` false, ``CKA_SENSITIVE``
true) and signs with ``CKM_EDDSA``; only its public half (``CKA_EC_POINT``, a DER octet string)
comes out. SoftHSM2 is a library loaded into the process that uses it and decrypts the key
there: it keeps the key out of the bot only because this process is not the bot.

Errors from python-pkcs11 are translated here into :class:`~solver.errors.ConfigError` lines
naming the module, the token or the key label, never the PIN.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from solver.errors import ConfigError
from solver.protocol.keys import PublicKey

ED25519_OID = "1.3.101.112"
T = TypeVar("T")


def _pkcs11() -> Any:
    try:
        import pkcs11
    except ImportError:
        raise ConfigError(
            "PKCS#11 needs the python-pkcs11 package (pip install 'intents-solver[pkcs11]')"
        ) from None
    return pkcs11


def _ec_params() -> bytes:
    from pkcs11.util.ec import encode_named_curve_parameters

    params: bytes = encode_named_curve_parameters(ED25519_OID)
    return params


@contextmanager
def translated(module: str, token: str, key_label: str | None = None) -> Iterator[None]:
    """python-pkcs11's exceptions as one-line :class:`ConfigError`s naming what and where."""
    pkcs11 = _pkcs11()
    exc = pkcs11.exceptions
    where = f"PKCS#11 token {token!r} (module {module})"
    try:
        yield
    except exc.PinIncorrect:
        raise ConfigError(f"{where}: the PIN is incorrect") from None
    except exc.PinLocked:
        raise ConfigError(f"{where}: the PIN is locked") from None
    except (exc.PinLenRange, exc.PinInvalid):
        raise ConfigError(f"{where}: the new PIN is not acceptable to the token") from None
    except exc.NoSuchToken:
        raise ConfigError(f"PKCS#11 module {module}: no token labelled {token!r}") from None
    except exc.NoSuchKey:
        raise ConfigError(f"{where}: no Ed25519 key labelled {key_label!r}") from None
    except exc.MultipleObjectsReturned:
        raise ConfigError(f"{where}: several keys labelled {key_label!r}") from None
    except exc.PKCS11Error as error:
        text = str(error) or type(error).__name__
        if "loading" in text or "C_GetFunctionList" in text:
            raise ConfigError(f"module {module} is not a loadable PKCS#11 library") from None
        raise ConfigError(f"{where}: {type(error).__name__}") from None


def load_library(module: str) -> Any:
    """The PKCS#11 library at ``module`` (a path to a ``.so``)."""
    pkcs11 = _pkcs11()
    with translated(module, "?"):
        return pkcs11.lib(module)


def _public_key(session: Any, label: str) -> PublicKey:
    pkcs11 = _pkcs11()
    key = session.get_key(object_class=pkcs11.ObjectClass.PUBLIC_KEY, label=label)
    point = bytes(key[pkcs11.Attribute.EC_POINT])
    # A DER OCTET STRING (04 20 + 32 bytes) as the standard says; some modules give it raw.
    raw = point[2:] if len(point) == 34 and point[:2] == b"\x04\x20" else point
    if len(raw) != 32:
        raise ConfigError(f"key {label!r}: its public point is not an Ed25519 key")
    return PublicKey(raw)


class TokenKeyHolder:
    """An Ed25519 key in a token, signing through one logged-in session.

    One session, calls serialised: python-pkcs11 0.10.1 initialises the module with
    ``C_Initialize(NULL)``, which tells it that no two threads call at once, and SoftHSM2 then
    takes no locks (two threads signing on two sessions fail with ``CKR_GENERAL_ERROR``,
    measured). The signer still signs on a worker thread (``inline`` False): the GIL is
    released during ``C_Sign``, so its loop reads the next batch meanwhile. Parallel signing
    would need one process per session."""

    inline = False

    def __init__(self, module: str, token_label: str, key_label: str, pin: str) -> None:
        pkcs11 = _pkcs11()
        self._where = (module, token_label, key_label)
        self._mechanism = pkcs11.Mechanism.EDDSA
        self._lock = threading.Lock()
        with translated(module, token_label, key_label):
            token = load_library(module).get_token(token_label=token_label)
            self._session: Any = token.open(user_pin=pin)
            self._private = self._session.get_key(
                object_class=pkcs11.ObjectClass.PRIVATE_KEY, label=key_label
            )
            self.public_key = _public_key(self._session, key_label)

    def sign(self, digest: bytes) -> bytes:
        with self._lock, translated(*self._where):
            return bytes(self._private.sign(digest, mechanism=self._mechanism))

    def close(self) -> None:
        if self._session is not None:
            with contextlib.suppress(Exception):  # closing at exit: nothing to do about it
                self._session.close()
            self._session = None

    def __repr__(self) -> str:
        return f"TokenKeyHolder(public_key={self.public_key.to_text()!r})"


def _with_session(
    module: str, token_label: str, pin: str, action: Callable[[Any], T], key_label: str = ""
) -> T:
    with translated(module, token_label, key_label):
        token = load_library(module).get_token(token_label=token_label)
        with token.open(rw=True, user_pin=pin) as session:
            return action(session)


def _refuse_existing(session: Any, label: str, where: str) -> None:
    pkcs11 = _pkcs11()
    if list(session.get_objects({pkcs11.Attribute.LABEL: label})):
        raise ConfigError(f"{where}: a key labelled {label!r} exists already")


def generate_key(module: str, token_label: str, key_label: str, pin: str) -> PublicKey:
    """Make a non-extractable Ed25519 key pair in the token; its public key."""
    pkcs11 = _pkcs11()
    attr = pkcs11.Attribute
    where = f"PKCS#11 token {token_label!r} (module {module})"

    def make(session: Any) -> PublicKey:
        _refuse_existing(session, key_label, where)
        session.generate_keypair(
            pkcs11.KeyType.EC_EDWARDS,
            mechanism=pkcs11.Mechanism.EC_EDWARDS_KEY_PAIR_GEN,
            public_template={
                attr.EC_PARAMS: _ec_params(),
                attr.LABEL: key_label,
                attr.TOKEN: True,
                attr.VERIFY: True,
            },
            private_template={
                attr.LABEL: key_label,
                attr.TOKEN: True,
                attr.PRIVATE: True,
                attr.SENSITIVE: True,
                attr.EXTRACTABLE: False,
                attr.SIGN: True,
            },
            store=True,
        )
        return _public_key(session, key_label)

    return _with_session(module, token_label, pin, make, key_label)


def import_key(
    module: str, token_label: str, key_label: str, pin: str, seed: bytes, public: PublicKey
) -> PublicKey:
    """Put an existing Ed25519 key (its 32-byte seed) into the token, non-extractable from
    then on: for tests and for moving a key file's key into a token."""
    pkcs11 = _pkcs11()
    attr = pkcs11.Attribute
    where = f"PKCS#11 token {token_label!r} (module {module})"

    def put(session: Any) -> PublicKey:
        _refuse_existing(session, key_label, where)
        common = {
            attr.KEY_TYPE: pkcs11.KeyType.EC_EDWARDS,
            attr.EC_PARAMS: _ec_params(),
            attr.LABEL: key_label,
            attr.TOKEN: True,
        }
        session.create_object(
            {
                **common,
                attr.CLASS: pkcs11.ObjectClass.PRIVATE_KEY,
                attr.VALUE: seed,
                attr.PRIVATE: True,
                attr.SENSITIVE: True,
                attr.EXTRACTABLE: False,
                attr.SIGN: True,
            }
        )
        session.create_object(
            {
                **common,
                attr.CLASS: pkcs11.ObjectClass.PUBLIC_KEY,
                attr.EC_POINT: b"\x04\x20" + public.raw,
                attr.VERIFY: True,
            }
        )
        return _public_key(session, key_label)

    return _with_session(module, token_label, pin, put, key_label)


def delete_key(module: str, token_label: str, key_label: str, pin: str) -> int:
    """Remove both halves of a key (after its rotation); how many objects went."""
    pkcs11 = _pkcs11()

    def remove(session: Any) -> int:
        objects = list(session.get_objects({pkcs11.Attribute.LABEL: key_label}))
        for obj in objects:
            obj.destroy()
        return len(objects)

    return _with_session(module, token_label, pin, remove, key_label)


def change_pin(module: str, token_label: str, old_pin: str, new_pin: str) -> None:
    """The user PIN changed (``C_SetPIN`` in a user session)."""

    def set_pin(session: Any) -> None:
        session.set_pin(old_pin, new_pin)

    _with_session(module, token_label, old_pin, set_pin)
