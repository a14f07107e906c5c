"""An MCP server on the official Python SDK (PyPI `mcp` 2.x) that asks the user for input, for
picogent's host-side elicitation tests: `python elicit_server.py` (stdio), or
`python elicit_server.py --http PORT [--json]` (Streamable HTTP on 127.0.0.1:PORT/mcp, answering
POSTs with an event stream, the SDK's default, or with a JSON body; with a JSON body a
2025-11-25 tool call cannot elicit and fails with -32600 "no back-channel").

It speaks both protocol eras the SDK serves, picked by the client's opening message:
- 2025-11-25 (`initialize`): the tool sends `elicitation/create` to the client in the middle of
  the `tools/call` and waits for its answer;
- 2026-07-28 (`server/discover`, per-request `_meta` envelope): servers may not send requests, so
  the first `tools/call` answers `{"resultType": "input_required", "inputRequests": {...},
  "requestState": "..."}` and the client calls the tool again with the same name and arguments
  plus `inputResponses` (keyed like `inputRequests`) and `requestState` echoed verbatim. The SDK
  seals `requestState` (AES-GCM, a key made at start-up, 10 minutes, bound to the method, the tool
  name and the arguments); anything else is refused with -32602 "Invalid or expired requestState".
  ELICIT_REQUEST_STATE_KEY (32 bytes or more) makes the key fixed, so a `requestState` minted
  before a restart still opens; ELICIT_REQUEST_STATE_TTL sets its lifetime in seconds.

Tools (none take arguments):
- `book_table`: a form, through the SDK's `Resolve`/`Elicit` dependency (the SDK picks the
  era's path itself): `party_size` integer 1..12, `name` string, `time` one of 18:00, 19:00,
  20:00 (all required), `vegetarian` boolean (optional). Answers `booked a table for
  {party_size} at {time} for {name}` (+ `, vegetarian`), `the user declined`, or
  `the user cancelled`.
- `plan_trip`: two forms, one after the other in the same call (the second depends on the
  first, so on 2026-07-28 they come in two rounds): `city` (string), then `nights` (integer
  1..30). Answers `planned {nights} nights in {city}`; a decline or cancel fails the call (the
  SDK's way for a resolver whose value the tool needs).
- `connect_account`: a URL (`https://auth.example.com/connect?session=<random>`), handled by
  hand on each era. Answers `connected` on accept (on 2025-11-25 after sending
  `notifications/elicitation/complete` for the elicitation), `not connected: decline|cancel`
  otherwise. A client that did not declare `elicitation.url` gets the JSON-RPC error -32021
  (missing required client capability), as `book_table` does without `elicitation.form`.
- `connect_account_strict`: fails its first call with the JSON-RPC error -32042 (URL elicitation
  required, `UrlElicitationRequiredError`) naming such a URL, and answers `connected` on every
  later call. Calls are counted in the file named by ELICIT_STATE_FILE (shared between server
  processes and restarts), else in memory.

ELICIT_LOG_FILE, when set, names a file each tool appends a line to with the outcome of its
question as the server got it (`book_table accept`, `book_table cancel`, `plan_trip decline`,
…): what the client told the server, for the tests to read.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
from typing import Annotated, Literal

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    RequestStateSecurity,
    Resolve,
)
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp.types import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    ElicitRequest,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field


def request_state_security() -> RequestStateSecurity | None:
    """The SDK's default (a key made now, 600 s) unless ELICIT_REQUEST_STATE_KEY/_TTL say otherwise."""
    key = os.environ.get("ELICIT_REQUEST_STATE_KEY")
    ttl = float(os.environ.get("ELICIT_REQUEST_STATE_TTL") or 600)
    if key:
        return RequestStateSecurity(keys=[key], ttl=ttl)
    return RequestStateSecurity.ephemeral(ttl=ttl) if "ELICIT_REQUEST_STATE_TTL" in os.environ else None


server = MCPServer("elicit", request_state_security=request_state_security())

CONNECT_URL = "https://auth.example.com/connect?session={session}"
CONNECT_MESSAGE = "Open this page to connect your account."
# The key of the URL request in a 2026-07-28 `inputRequests` map.
CONNECT_KEY = "connect"


class Booking(BaseModel):
    party_size: int = Field(ge=1, le=12, description="How many people")
    name: str = Field(description="Whose name the table is under")
    time: Literal["18:00", "19:00", "20:00"] = Field(description="When")
    vegetarian: bool | None = Field(default=None, description="A vegetarian menu")


def ask_booking() -> Elicit[Booking]:
    return Elicit("Who is the table for?", Booking)


def log_outcome(tool: str, action: str) -> None:
    """Appends `{tool} {action}` to ELICIT_LOG_FILE, when that is set."""
    path = os.environ.get("ELICIT_LOG_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{tool} {action}\n")


@server.tool(structured_output=False, description="Books a table, asking the user who it is for.")
async def book_table(booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]) -> str:
    log_outcome("book_table", booking.action)
    if isinstance(booking, AcceptedElicitation):
        data = booking.data
        text = f"booked a table for {data.party_size} at {data.time} for {data.name}"
        return text + (", vegetarian" if data.vegetarian else "")
    return "the user declined" if booking.action == "decline" else "the user cancelled"


class Deployment(BaseModel):
    version: str = Field(description="Which version to deploy")
    confirm: bool = Field(description="Deploy it now")


def ask_deployment() -> Elicit[Deployment]:
    return Elicit("Which version, and shall I deploy it now?", Deployment)


@server.tool(structured_output=False, description="Deploys a version, asking the user which one.")
async def deploy(deployment: Annotated[ElicitationResult[Deployment], Resolve(ask_deployment)]) -> str:
    log_outcome("deploy", deployment.action)
    if isinstance(deployment, AcceptedElicitation):
        data = deployment.data
        return f"deployed {data.version}" if data.confirm else f"did not deploy {data.version}"
    return "the user declined" if deployment.action == "decline" else "the user cancelled"


class Destination(BaseModel):
    city: str = Field(description="Which city")


class Stay(BaseModel):
    nights: int = Field(ge=1, le=30, description="How many nights")


def ask_city() -> Elicit[Destination]:
    return Elicit("Where to?", Destination)


def ask_nights(destination: Annotated[Destination, Resolve(ask_city)]) -> Elicit[Stay]:
    return Elicit(f"How many nights in {destination.city}?", Stay)


@server.tool(structured_output=False, description="Plans a trip, asking the user where to, then for how long.")
async def plan_trip(
    destination: Annotated[Destination, Resolve(ask_city)],
    stay: Annotated[Stay, Resolve(ask_nights)],
) -> str:
    log_outcome("plan_trip", "accept")
    return f"planned {stay.nights} nights in {destination.city}"


def modern(ctx: Context) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def require_url_capability(ctx: Context) -> None:
    """Refuses, as the SDK does for a form, a client that cannot be sent to a page."""
    capabilities = ctx.client_capabilities
    if capabilities is None or capabilities.elicitation is None or capabilities.elicitation.url is None:
        raise MCPError(
            code=MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="Client did not declare the url elicitation capability required by connect_account",
            data={"requiredCapabilities": {"elicitation": {"url": {}}}},
        )


@server.tool(structured_output=False, description="Connects the user's account on an outside page.")
async def connect_account(ctx: Context) -> str | InputRequiredResult:
    require_url_capability(ctx)
    if not modern(ctx):
        session = secrets.token_hex(8)
        answer = await ctx.elicit_url(CONNECT_MESSAGE, CONNECT_URL.format(session=session), session)
        if answer.action != "accept":
            return f"not connected: {answer.action}"
        await ctx.session.send_elicit_complete(session, related_request_id=ctx.request_id)
        return "connected"

    # 2026-07-28: ask by returning the question; the answer comes with the next call.
    state = json.loads(ctx.request_state) if ctx.request_state else None
    answer = (ctx.input_responses or {}).get(CONNECT_KEY)
    if state is not None and isinstance(answer, ElicitResult):
        return "connected" if answer.action == "accept" else f"not connected: {answer.action}"
    session = secrets.token_hex(8)
    question = ElicitRequest(
        params=ElicitRequestURLParams(message=CONNECT_MESSAGE, url=CONNECT_URL.format(session=session))
    )
    return InputRequiredResult(input_requests={CONNECT_KEY: question}, request_state=json.dumps({"session": session}))


_strict_calls = 0


def count_call() -> int:
    """This call's number, 1 for the first, kept in ELICIT_STATE_FILE when that is set."""
    global _strict_calls
    path = os.environ.get("ELICIT_STATE_FILE")
    if not path:
        _strict_calls += 1
        return _strict_calls
    try:
        with open(path, encoding="utf-8") as f:
            calls = int(f.read().strip() or 0)
    except FileNotFoundError:
        calls = 0
    calls += 1
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{calls}\n")
    return calls


@server.tool(
    structured_output=False,
    description="Connects the user's account; the first call fails until the user has opened a page.",
)
async def connect_account_strict() -> str:
    if count_call() == 1:
        session = secrets.token_hex(8)
        raise UrlElicitationRequiredError(
            [
                ElicitRequestURLParams(
                    message=CONNECT_MESSAGE, url=CONNECT_URL.format(session=session), elicitation_id=session
                )
            ]
        )
    return "connected"


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve Streamable HTTP on 127.0.0.1:PORT/mcp")
    parser.add_argument("--json", action="store_true", help="over HTTP, answer POSTs with a JSON body")
    args = parser.parse_args()
    if args.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=args.http, json_response=args.json)
    else:
        server.run("stdio")
