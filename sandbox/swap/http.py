"""HTTP plumbing shared by the sandbox swap API and history API (spec 5.1, 7.7; docs/swap-api.md).

- One error body everywhere: ``{"error": CODE, "message": text, "field": name?}``. It is the
  official 1Click API's ``BadRequestResponse`` (``{"message"}``, protocol-notes 7) with the
  sandbox's machine code and offending field added, and the message names that field. HTTP codes
  as the official API answers them: 400 for any bad input (query parameter or request body, and
  no quote), 401 (missing or invalid credentials), 404 (unknown deposit or path), 405 with the
  ``Allow`` header RFC 9110 15.5.6 requires, and 413 (body too large).
- Bearer tokens: ``Authorization: Bearer <JWT>``, HS256, verified with the configured secret.
- OpenAPI: request bodies are read raw and validated with ``model_validate_json`` (so a JSON
  number is never taken for an amount string), so their schemas, the query parameters and the
  bearer scheme are added to the generated document here.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import jwt
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

JWT_ALGORITHMS = ["HS256"]
REF_TEMPLATE = "#/components/schemas/{model}"
BEARER_SCHEME = "bearerAuth"
API_KEY_SCHEME = "apiKeyAuth"
API_KEY_HEADER = "X-API-Key"


class ApiError(Exception):
    """An error answer: HTTP status, machine code, human message and the offending field."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


def bad_parameter(message: str, field: str | None = None) -> ApiError:
    return ApiError(400, "BAD_PARAMETER", message, field)


def invalid_body(message: str, field: str | None = None) -> ApiError:
    """A request body the API refuses: 400, as the official API answers it (protocol-notes 7)."""
    return ApiError(400, "INVALID_BODY", message, field)


def not_found(message: str) -> ApiError:
    return ApiError(404, "NOT_FOUND", message)


class ErrorBody(BaseModel):
    """The error body of every non-2xx answer of both APIs."""

    model_config = ConfigDict(extra="forbid")
    error: str
    message: str
    field: str | None = None


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "Bad query parameter or request body, or no solver quoted (NO_QUOTE)"),
        (401, "Missing (history) or invalid bearer token"),
        (404, "Unknown deposit address / memo"),
        (413, "Request body too large"),
    )
}


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"error": code, "message": message}
    if field is not None:
        body["field"] = field
    return JSONResponse(body, status_code=status, headers=headers)


def allowed_methods(request: Request) -> str:
    """The ``Allow`` value of a 405: every method some route serves on the request's path.

    Starlette's own 405 names the methods of the first route matching the path only."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)  # PARTIAL: the path matches, the method does not
        if match is Match.PARTIAL and isinstance(route, Route):
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


_UNION_TAGS = frozenset({"int", "float", "str", "bool", "list", "dict", "none"})


def _is_union_tag(part: str) -> bool:
    """Pydantic names union branches in ``loc`` (``int``, ``constrained-float``, …)."""
    return part in _UNION_TAGS or part.startswith(("constrained-", "function-")) or "[" in part


def _field(err: Any) -> str:
    return ".".join(str(p) for p in err["loc"] if not _is_union_tag(str(p)))


def validation_problem(exc: ValidationError) -> tuple[str, str | None]:
    """The first bad field as ``(message, field)``; the field uses the wire (camelCase) names.

    A union field fails once per branch; the last branch's words are kept (for ``int | float``
    "greater than or equal to 0" says more than the int branch's "should be a valid integer")."""
    errors = exc.errors(include_url=False)
    field = _field(errors[0])
    err = [e for e in errors if _field(e) == field][-1]
    return (f"{field}: {err['msg']}" if field else str(err["msg"])), field or None


def _no_such_path(method: str, path: str) -> str:
    return f"no such path: {method} {path[:200]}"


def install_error_handlers(
    app: FastAPI, path_message: Callable[[str, str], str] = _no_such_path
) -> None:
    """JSON error bodies for every failure; an unknown path's 404 names the method and path
    (``path_message(method, path)``), so a client learns what the server does not serve."""

    async def on_api_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(exc.status, exc.code, exc.message, exc.field)

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        codes = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "BODY_TOO_LARGE"}
        message = exc.detail
        if exc.status_code == 404 and message == "Not Found":  # no route matched
            message = path_message(request.method, request.url.path)
        headers = None
        if exc.status_code == 405:
            headers = {"Allow": allowed_methods(request)}
            message = (
                f"{request.method} is not allowed on {request.url.path[:200]} "
                f"(allowed: {headers['Allow']})"
            )
        code = codes.get(exc.status_code, "ERROR")
        return error_response(exc.status_code, code, message, headers=headers)

    async def on_validation_error(_: Request, exc: Exception) -> JSONResponse:
        return error_response(400, "BAD_PARAMETER", str(exc)[:300])

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)


# ---------------------------------------------------------------------------------- auth


def bearer_token(request: Request) -> str | None:
    """The token of ``Authorization: Bearer <token>``; None without the header; 401 otherwise."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "UNAUTHORIZED", "Authorization must be 'Bearer <JWT>'")
    return token.strip()


def api_key_token(request: Request) -> str | None:
    """The token of an ``X-API-Key`` header, the official 1Click API's other credential carrier
    (security ``X-API-Key`` or ``JWT-auth``, protocol-notes 7); None without the header. The
    sandbox takes the same JWT there: an empty or invalid one is a 401 like a bad bearer."""
    return request.headers.get(API_KEY_HEADER)


def verify_jwt(token: str, secret: bytes) -> dict[str, Any]:
    """Claims of a valid HS256 token (``exp`` / ``nbf`` checked when present); 401 otherwise."""
    try:
        claims: dict[str, Any] = jwt.decode(
            token, secret, algorithms=JWT_ALGORITHMS, options={"verify_aud": False}
        )
    except jwt.PyJWTError:
        raise ApiError(401, "UNAUTHORIZED", "invalid bearer token") from None
    return claims


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The raw body, refused with 413 past ``max_bytes`` (read in chunks, never all at once)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise ApiError(413, "BODY_TOO_LARGE", f"body larger than {max_bytes} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise ApiError(413, "BODY_TOO_LARGE", f"body larger than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def query_items(request: Request) -> dict[str, str]:
    """Query parameters as a dict; a repeated parameter is a 400, an empty one is unset."""
    out: dict[str, str] = {}
    for key, value in request.query_params.multi_items():
        if key in out:
            raise bad_parameter(f"{key} is given more than once", key)
        if value != "":
            out[key] = value
    return out


Q = TypeVar("Q", bound=BaseModel)


def parse_query(model: type[Q], request: Request) -> Q:
    """The query parameters validated as ``model``; a bad one is a 400 naming its field."""
    try:
        return model.model_validate(query_items(request))
    except ValidationError as exc:
        message, field = validation_problem(exc)
        raise bad_parameter(message, field) from None


# ---------------------------------------------------------------------------------- openapi


def model_schema(model: type[BaseModel]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(schema, definitions)`` of a model in wire names, refs into components."""
    schema = model.model_json_schema(by_alias=True, ref_template=REF_TEMPLATE)
    defs = schema.pop("$defs", {})
    return schema, defs


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a JSON request body of ``model`` (its schema is in components)."""
    ref = {"$ref": REF_TEMPLATE.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _inline(schema: Any, defs: Mapping[str, Any]) -> Any:
    if isinstance(schema, dict):
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return _inline(copy.deepcopy(defs[ref.rsplit("/", 1)[-1]]), defs)
        return {k: _inline(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline(v, defs) for v in schema]
    return schema


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    variants = schema.get("anyOf")
    if not isinstance(variants, list):
        return schema
    kept = [v for v in variants if v != {"type": "null"}]
    rest = {k: v for k, v in schema.items() if k not in ("anyOf", "default")}
    return {**kept[0], **rest} if len(kept) == 1 else {**rest, "anyOf": kept}


def query_parameters(
    model: type[BaseModel],
    overrides: Mapping[str, dict[str, Any]] | None = None,
    required: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """OpenAPI query parameters for every field of ``model`` (wire names, refs inlined,
    ``null`` dropped: a query string has no null)."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})
    params = []
    for name, prop in schema.get("properties", {}).items():
        spec = (overrides or {}).get(name) or _without_null(_inline(prop, defs))
        spec = {k: v for k, v in spec.items() if k != "title"}
        entry: dict[str, Any] = {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": spec,
        }
        if "description" in spec:
            entry["description"] = spec.pop("description")
        params.append(entry)
    return params


def install_openapi(
    app: FastAPI,
    models: tuple[type[BaseModel], ...],
    describe: Callable[[], str],
    *,
    api_key: bool = False,
) -> None:
    """Generate the document once, adding request-body models and the bearer scheme (and the
    ``X-API-Key`` scheme when the API takes that carrier too: ``api_key``)."""

    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(
            title=app.title,
            version=app.version,
            description=describe(),
            routes=app.routes,
            separate_input_output_schemas=False,
        )
        components = doc.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        for model in models:
            schema, defs = model_schema(model)
            schemas.update(defs)
            schemas[model.__name__] = schema
        schemes: dict[str, Any] = {
            BEARER_SCHEME: {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
        }
        if api_key:
            schemes[API_KEY_SCHEME] = {"type": "apiKey", "in": "header", "name": API_KEY_HEADER}
        components["securitySchemes"] = schemes
        app.openapi_schema = doc
        return doc

    app.openapi = build  # type: ignore[method-assign]
