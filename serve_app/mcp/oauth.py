"""The MCP server's OAuth door: the authorization server's endpoints (RFC 8414
metadata, authorize, token, register, revoke) and the protected resource
metadata of ``/mcp`` (RFC 9728), answered by the MCP SDK's own handlers
(mcp.server.auth) over ``Provider``, which keeps the state through
services/oauth.py, one transaction per step. The rules and the consent are
Cairn's (docs/decisions/oauth.md); the protocol is the SDK's, but where its
handlers fall short of the RFCs Cairn wraps them (``_token_endpoint``,
``_with_iss``) or answers itself (``_revocation``).

Each route sits behind the admission layer (``admission.guard``): the
address's read budget, no credential looked at (a client authenticates at
the token endpoint with its own secret, checked by ``ClientSecretCheck``);
``/register`` counts its own per-address rule too."""

from __future__ import annotations

import base64
import binascii
from contextvars import ContextVar
from dataclasses import replace
from functools import partial
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.metadata import MetadataHandler, ProtectedResourceMetadataHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.token import TokenErrorResponse, TokenHandler
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import (
    AuthorizationParams,
    AuthorizeError,
    OAuthAuthorizationServerProvider,
    RegistrationError,
    TokenError,
)
from mcp.server.auth.routes import (
    build_metadata,
    build_resource_metadata_url,
    cors_middleware,
)
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, ProtectedResourceMetadata
from mcp.shared.auth import OAuthToken as TokenReply
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from serve_app.context import AppContext
from serve_app.http import admission, deps
from serve_app.kit import keys
from serve_app.services import oauth
from serve_app.services.oauth import CairnAccess, CairnCode, CairnRefresh, Refused

# The rate-limit subject of the client address of the request being answered
# (set by ``_addressed``): the SDK's handlers call the provider without it.
_ADDRESS: ContextVar[str] = ContextVar("cairn_oauth_address", default="unknown")

# OAuth's form and JSON bodies are small (a registration is at most
# ``oauth.CLIENT_INFO_MAX_BYTES``); a larger one is refused with a 413 by its
# Content-Length before it is read (http/bodylimit.py), not read and parsed
# to be refused (issue 45, M3: 900 kB registrations).
BODY_MAX_BYTES = 65_536
BODY_LIMITS = {
    ("POST", path): BODY_MAX_BYTES for path in ("/authorize", "/token", "/register", "/revoke")
}


def _addressed(handle: Any) -> Any:
    """``handle`` with the admitted client address at hand for ``Provider``."""

    async def addressed(request: Request) -> Response:
        token = _ADDRESS.set(admission.admitted(request).ip_subject)
        try:
            response: Response = await handle(request)
            return response
        finally:
            _ADDRESS.reset(token)

    return addressed


class Provider(OAuthAuthorizationServerProvider[CairnCode, CairnRefresh, CairnAccess]):
    """The SDK's provider protocol over Cairn's store: each call one transaction."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        # The transaction takes a connection only when the service writes, after
        # any metadata-document fetch (read, release, fetch, write).
        async with deps.transaction(self.ctx) as db:
            return await oauth.get_client(self.ctx, db, client_id, _ADDRESS.get())

    # A refusal comes back as a value, and the SDK's (frozen) error is raised
    # once the transaction ended, so what was done before it commits.

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        async with deps.transaction(self.ctx) as db:
            refused = await oauth.register_client(self.ctx, db, client_info)
        if refused is not None:
            raise RegistrationError(refused.error, refused.description)  # type: ignore[arg-type]

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        async with deps.transaction(self.ctx) as db:
            found = await oauth.begin(self.ctx, db, client, params)
        if isinstance(found, Refused):
            raise AuthorizeError(found.error, found.description)  # type: ignore[arg-type]
        return found

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> CairnCode | None:
        async with deps.transaction(self.ctx) as db:
            return await oauth.load_code(self.ctx, db, client, authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: CairnCode
    ) -> TokenReply:
        async with deps.transaction(self.ctx) as db:
            found = await oauth.exchange_code(self.ctx, db, authorization_code)
        return _tokens(found)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> CairnRefresh | None:
        async with deps.transaction(self.ctx) as db:
            return await oauth.load_refresh(self.ctx, db, client, refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: CairnRefresh, scopes: list[str]
    ) -> TokenReply:
        async with deps.transaction(self.ctx) as db:
            found = await oauth.exchange_refresh(self.ctx, db, refresh_token, scopes)
        return _tokens(found)

    async def load_access_token(self, token: str) -> CairnAccess | None:
        async with deps.transaction(self.ctx) as db:
            return await oauth.load_access(self.ctx, db, token)

    async def revoke_token(self, token: CairnAccess | CairnRefresh) -> None:
        async with deps.transaction(self.ctx) as db:
            await oauth.revoke(db, token)


def _tokens(found: TokenReply | Refused) -> TokenReply:
    if isinstance(found, Refused):
        raise TokenError(found.error, found.description)  # type: ignore[arg-type]
    return found


def _basic_credentials(header: str) -> tuple[str, str]:
    """(client id, secret) of an ``Authorization: Basic`` value (each part
    URL-decoded, RFC 6749 §2.3.1); ValueError when it is not one."""
    try:
        decoded = base64.b64decode(header[6:]).decode()
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise ValueError("not base64 of UTF-8 text") from None
    client_id, _, secret = decoded.partition(":")
    return unquote(client_id), unquote(secret)


class ClientSecretCheck(ClientAuthenticator):
    """The SDK's client authentication, with the secret compared as a keyed
    hash: Cairn never stores a client secret in clear."""

    def __init__(self, provider: Provider) -> None:
        super().__init__(provider)
        self.cairn = provider

    async def authenticate_request(self, request: Request) -> OAuthClientInformationFull:
        form = await request.form()
        client_id = form.get("client_id")
        if not isinstance(client_id, str) or not client_id:
            raise AuthenticationError("Missing client_id")
        client = await self.cairn.get_client(client_id)
        if client is None:
            raise AuthenticationError("Invalid client_id")
        presented: str | None = None
        header = request.headers.get("authorization", "")
        if header.startswith("Basic "):
            try:
                basic_id, presented = _basic_credentials(header)
            except ValueError:
                raise AuthenticationError("Invalid Basic authentication header") from None
            if basic_id != client_id:
                raise AuthenticationError("Client ID mismatch in Basic auth")
        else:
            sent = form.get("client_secret")
            presented = sent if isinstance(sent, str) else None
        async with deps.transaction(self.cairn.ctx) as db:
            ok = await oauth.client_secret_ok(self.cairn.ctx, db, client_id, presented)
        if not ok:
            raise AuthenticationError("Invalid client_secret")
        return client


NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
# RFC 6749 §5.2: a client that authenticated with the Authorization header
# gets this challenge with its 401.
BASIC_CHALLENGE = 'Basic realm="Cairn"'


def _basic(request: Request) -> bool:
    return request.headers.get("authorization", "").startswith("Basic ")


async def _client_id_from_basic(request: Request) -> Request:
    """The request, with the client id of its ``Basic`` header added to the
    form where the form has none: RFC 6749 §2.3.1 lets a client that
    authenticates send it there only, while the SDK's handlers read it from
    the form. A malformed header is left for ``ClientSecretCheck`` to refuse."""
    if not _basic(request):
        return request
    form = await request.form()
    if form.get("client_id"):
        return request
    try:
        client_id, _ = _basic_credentials(request.headers["authorization"])
    except ValueError:
        return request
    fields = [(k, v) for k, v in form.multi_items() if isinstance(v, str)]
    body = urlencode([*fields, ("client_id", client_id)]).encode()
    headers = [
        (k, v) for k, v in request.scope["headers"] if k not in (b"content-type", b"content-length")
    ]
    headers += [
        (b"content-type", b"application/x-www-form-urlencoded"),
        (b"content-length", str(len(body)).encode()),
    ]
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return Request({**request.scope, "headers": headers}, receive)


def _invalid_client(request: Request, message: str) -> Response:
    """401 ``invalid_client`` (RFC 6749 §5.2), with the Basic challenge where
    the client authenticated with the header."""
    response = PydanticJSONResponse(
        content=TokenErrorResponse(error="invalid_client", error_description=message),
        status_code=401,
        headers=NO_STORE,
    )
    if _basic(request):
        response.headers["WWW-Authenticate"] = BASIC_CHALLENGE
    return response


def _token_endpoint(handler: TokenHandler, resource: str) -> Any:
    """The SDK's token endpoint, refusing first a ``resource`` other than this
    MCP server (RFC 8707 ``invalid_target``): the SDK hands the provider the
    resource of the authorization request, not the one of the token request.
    A ``client_secret_basic`` client need not repeat its id in the form, and
    its 401 carries the Basic challenge."""

    async def handle(request: Request) -> Response:
        request = await _client_id_from_basic(request)
        form = await request.form()  # cached on the request for the handler
        asked = form.get("resource")
        if isinstance(asked, str) and asked.rstrip("/") != resource:
            return PydanticJSONResponse(
                content=TokenErrorResponse(
                    error="invalid_target",
                    error_description=f"This server issues tokens only for {resource}.",
                ),
                status_code=400,
                headers=NO_STORE,
            )
        response = await handler.handle(request)
        if response.status_code == 401 and _basic(request):
            response.headers["WWW-Authenticate"] = BASIC_CHALLENGE
        return response

    return handle


def _revocation(provider: Provider, authenticator: ClientSecretCheck) -> Any:
    """Token revocation (RFC 7009). Not the SDK's handler: that one requires a
    ``client_secret`` field even from a public client (which has none, RFC 7009
    §2.1) and answers a failed client authentication with
    ``unauthorized_client`` rather than ``invalid_client``."""

    async def handle(request: Request) -> Response:
        request = await _client_id_from_basic(request)
        try:
            client = await authenticator.authenticate_request(request)
        except AuthenticationError as e:
            return _invalid_client(request, e.message)
        form = await request.form()
        token = form.get("token")
        if not isinstance(token, str) or not token:
            return PydanticJSONResponse(
                content=TokenErrorResponse(
                    error="invalid_request", error_description="token: required."
                ),
                status_code=400,
                headers=NO_STORE,
            )
        loaders: list[Any] = [
            provider.load_access_token,
            partial(provider.load_refresh_token, client),
        ]
        if form.get("token_type_hint") == "refresh_token":
            loaders.reverse()
        for load in loaders:
            found = await load(token)
            if found is not None:
                if found.client_id == client.client_id:
                    await provider.revoke_token(found)
                break
        # Unknown, expired or another client's token: 200 all the same (§2.2).
        return Response(status_code=200, headers=NO_STORE)

    return handle


def _errors_at_home(handler: AuthorizationHandler) -> Any:
    """The SDK's authorization endpoint, its error redirects answered here
    instead (issue 45, L1): every client Cairn knows registered itself or
    named its own document, so the redirect URI is whatever a stranger wrote,
    and sending a browser there at once from a Cairn link would lend Cairn's
    name to it. The error is shown by Cairn (400, the OAuth error fields);
    only once a person has seen the consent page, with the destination on
    it, does an answer (a denial too) go back to the client."""

    async def handle(request: Request) -> Response:
        response: Response = await handler.handle(request)
        location = response.headers.get("location")
        if response.status_code in (302, 303) and location:
            query = parse_qs(urlsplit(location).query)
            if "error" in query:
                description = query.get("error_description", [""])[0]
                # The OAuth fields, and the API's "message" beside them.
                return JSONResponse(
                    {
                        "error": query["error"][0],
                        "error_description": description,
                        "message": description,
                    },
                    status_code=400,
                    headers=NO_STORE,
                )
        return response

    return handle


# A URL as written: "https://cairn.example" stays without a trailing slash,
# as RFC 8414 compares issuers character by character.
_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))


def resource_metadata_url(ctx: AppContext) -> str:
    return str(build_resource_metadata_url(AnyHttpUrl(ctx.settings.mcp_url)))


def challenge(ctx: AppContext, error: str | None = None) -> str:
    """The ``WWW-Authenticate`` value of a 401 or 403 from /mcp (RFC 6750, RFC 9728)."""
    parts = [f'resource_metadata="{resource_metadata_url(ctx)}"']
    if error == "invalid_token":
        parts.insert(0, 'error="invalid_token"')
    elif error == "insufficient_scope":
        parts[:0] = ['error="insufficient_scope"', f'scope="{" ".join(keys.SCOPES)}"']
    return "Bearer " + ", ".join(parts)


def routes(ctx: AppContext) -> list[BaseRoute]:
    """The authorization server's and the resource metadata's routes, guarded."""
    settings = ctx.settings
    provider = Provider(ctx)
    issuer = _URL.validate_python(settings.base_url)
    registration = ClientRegistrationOptions(
        enabled=True, valid_scopes=list(keys.SCOPES), default_scopes=list(keys.SCOPES)
    )
    metadata = build_metadata(issuer, None, registration, RevocationOptions(enabled=True))
    # Client ID Metadata Documents and the RFC 9207 ``iss`` on every redirect.
    metadata.client_id_metadata_document_supported = True
    metadata.authorization_response_iss_parameter_supported = True
    metadata.token_endpoint_auth_methods_supported = [
        "none",
        "client_secret_post",
        "client_secret_basic",
    ]
    authenticator = ClientSecretCheck(provider)
    token = TokenHandler(provider, authenticator)
    authorization = _errors_at_home(AuthorizationHandler(provider))
    resource = ProtectedResourceMetadata(
        resource=AnyHttpUrl(settings.mcp_url),
        authorization_servers=[issuer],
        scopes_supported=list(keys.SCOPES),
        resource_name="Cairn",
        resource_documentation=AnyHttpUrl(f"{settings.base_url}/skill.md"),
    )
    resource_path = AnyHttpUrl(resource_metadata_url(ctx)).path or "/"
    found: list[BaseRoute] = [
        Route(
            "/.well-known/oauth-authorization-server",
            cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]),
            methods=["GET", "OPTIONS"],
        ),
        Route(
            resource_path,
            cors_middleware(ProtectedResourceMetadataHandler(resource).handle, ["GET", "OPTIONS"]),
            methods=["GET", "OPTIONS"],
        ),
        Route("/authorize", _addressed(authorization), methods=["GET", "POST"]),
        Route(
            "/token",
            cors_middleware(
                _addressed(_token_endpoint(token, settings.mcp_url)), ["POST", "OPTIONS"]
            ),
            methods=["POST", "OPTIONS"],
        ),
        registering := Route(
            "/register",
            cors_middleware(
                RegistrationHandler(provider, registration).handle, ["POST", "OPTIONS"]
            ),
            methods=["POST", "OPTIONS"],
        ),
        Route(
            "/revoke",
            cors_middleware(_addressed(_revocation(provider, authenticator)), ["POST", "OPTIONS"]),
            methods=["POST", "OPTIONS"],
        ),
    ]
    # Public endpoints: no credential looked at, the address's read budget; a
    # registration stores what an anonymous caller sent: its own rule too.
    return [
        admission.guard(route, _registration if route is registering else admission.OPEN)
        for route in found
    ]


_REGISTER = replace(admission.OPEN, limits=(admission.LimitTag("ip", "oauth_register"),))


def _registration(method: str, body: bytes | None) -> admission.Policy:
    """A registration counts the address's oauth_register rule (its CORS
    preflight only the read budget)."""
    return _REGISTER if method == "POST" else admission.OPEN
