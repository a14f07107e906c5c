"""Drives picogent's MCP server with the official Python MCP SDK (PyPI `mcp`, 2.x).

Run by tests/mcp_server.rs, never by hand in CI. It checks what a host would do and prints one
line `REPORT {json}` at the end for the Rust test to assert on; any failed check exits non-zero
with a line saying what was expected and what came back.

    python_client.py --mode default|legacy --transport stdio --task TE-1 --project team \
        --message <id> -- /path/to/picogent mcp --stdio --config agent.json
    python_client.py --mode default|legacy --transport http --url http://127.0.0.1:8808/mcp \
        --token-env PICOGENT_MCP_TOKEN --task TE-1 --project team --message <id>

`--mode default` is the SDK's default (`auto`: `server/discover`, protocol 2026-07-28);
`--mode legacy` forces the `initialize` handshake (2025-11-25).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import asyncio
import json
import os
import sys

from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# Codes of a missing resource: the current spec's invalid params, and the legacy one.
INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002


class CheckFailed(Exception):
    pass


def check(condition: bool, what: str, got: object) -> None:
    if not condition:
        raise CheckFailed(f"{what}; got {got!r}")
    print(f"ok {what}", flush=True)


def text_of(result) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


async def exercise(client: Client, args: argparse.Namespace) -> dict:
    report: dict = {"protocol_version": client.protocol_version, "sdk": "mcp"}
    expected_version = "2026-07-28" if args.mode == "default" else "2025-11-25"
    check(client.protocol_version == expected_version, f"protocol version is {expected_version}", client.protocol_version)

    tools = (await client.list_tools()).tools
    names = [tool.name for tool in tools]
    report["tools"] = names
    check("get_task" in names and "add_step" in names, "tools/list offers get_task and add_step", names)
    get_task = next(tool for tool in tools if tool.name == "get_task")
    report["get_task_read_only"] = bool(get_task.annotations and get_task.annotations.read_only_hint)
    report["get_task_schema_properties"] = sorted((get_task.input_schema or {}).get("properties", {}).keys())

    resources = (await client.list_resources()).resources
    report["resources"] = [str(resource.uri) for resource in resources]
    check("board://members" in report["resources"], "resources/list has board://members", report["resources"])

    templates = (await client.list_resource_templates()).resource_templates
    report["templates"] = [template.uri_template for template in templates]
    for template in ("task://{key}", "task://{key}/messages", "project://{slug}"):
        check(template in report["templates"], f"resources/templates/list has {template}", report["templates"])

    prompts = (await client.list_prompts()).prompts
    report["prompts"] = {prompt.name: [a.name for a in prompt.arguments or []] for prompt in prompts}
    check(
        set(report["prompts"]) >= {"work_task", "reply_to", "standup"},
        "prompts/list has work_task, reply_to, standup",
        report["prompts"],
    )

    if args.mode == "default":
        # subscriptions/listen is acknowledged; this server has no agent, so nothing is honoured.
        async with client.listen(resources_list_changed=True) as subscription:
            honored = subscription.honored
        report["listen_honored"] = honored.model_dump(exclude_none=True) if honored is not None else None
        check(report["listen_honored"] is not None, "subscriptions/listen is acknowledged", report["listen_honored"])

    # A read and a write against the reference board, with progress asked for on the write.
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    result = await client.call_tool("get_task", {"task_id": args.task})
    check(not result.is_error, f"get_task {args.task} succeeds", text_of(result))
    report["get_task_text"] = text_of(result)
    report["get_task_structured_key"] = (result.structured_content or {}).get("key")

    step_title = f"interop step ({args.mode}, {args.transport})"
    result = await client.call_tool(
        "add_step", {"task_id": args.task, "title": step_title}, progress_callback=on_progress
    )
    check(not result.is_error, "add_step succeeds", text_of(result))
    report["progress"] = progress
    check(len(progress) >= 2, "add_step reported progress", progress)

    failing = await client.call_tool("get_task", {"task_id": "NOPE-404"})
    report["failing_call_is_error"] = bool(failing.is_error)
    report["failing_call_text"] = text_of(failing)
    check(failing.is_error is True, "a failing call is a result with isError", failing)

    invalid = await client.call_tool("get_task", {"task_id": 15})
    report["invalid_args_is_error"] = bool(invalid.is_error)
    check(invalid.is_error is True, "invalid arguments are a result with isError", invalid)

    try:
        await client.call_tool("no_such_tool", {})
        report["unknown_tool_error"] = None
    except MCPError as error:
        report["unknown_tool_error"] = error.code
    check(report["unknown_tool_error"] == INVALID_PARAMS, "an unknown tool is an invalid-params error", report)

    # Resources: the task with its steps (including the one just added), and a missing one.
    read = await client.read_resource(f"task://{args.task}")
    check(len(read.contents) == 1, "task resource has one content", read.contents)
    body = json.loads(read.contents[0].text)
    report["task_resource_key"] = body["task"]["key"]
    report["task_resource_steps"] = [step["title"] for step in body["steps"]]
    check(step_title in report["task_resource_steps"], "task resource shows the new step", report["task_resource_steps"])

    messages = await client.read_resource(f"task://{args.task}/messages")
    report["task_messages"] = [message["content"] for message in json.loads(messages.contents[0].text)]

    project = await client.read_resource(f"project://{args.project}")
    report["project_resource_slug"] = json.loads(project.contents[0].text)["slug"]

    try:
        missing = await client.read_resource("task://NOPE-404")
        report["missing_resource_error"] = {"contents": len(missing.contents)}
    except MCPError as error:
        report["missing_resource_error"] = {"code": error.code, "data": error.data, "message": error.message}
    expected_code = INVALID_PARAMS if args.mode == "default" else RESOURCE_NOT_FOUND
    check(
        report["missing_resource_error"].get("code") == expected_code,
        f"a missing resource is error {expected_code}",
        report["missing_resource_error"],
    )
    check(
        (report["missing_resource_error"].get("data") or {}).get("uri") == "task://NOPE-404",
        "the missing-resource error carries the uri",
        report["missing_resource_error"],
    )

    # Prompts, rendered from the templates with board data filled in.
    prompt = await client.get_prompt("work_task", {"task": args.task})
    report["work_task"] = prompt.messages[0].content.text
    prompt = await client.get_prompt("reply_to", {"message": args.message})
    report["reply_to"] = prompt.messages[0].content.text
    prompt = await client.get_prompt("standup", {"project": args.project})
    report["standup"] = prompt.messages[0].content.text
    try:
        await client.get_prompt("work_task", {})
        report["prompt_missing_argument_error"] = None
    except MCPError as error:
        report["prompt_missing_argument_error"] = error.code
    check(
        report["prompt_missing_argument_error"] == INVALID_PARAMS,
        "a prompt without its argument is an invalid-params error",
        report,
    )
    return report


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=["default", "legacy"], required=True)
    parser.add_argument("--transport", choices=["stdio", "http"], required=True)
    parser.add_argument("--url")
    parser.add_argument("--token-env", default="PICOGENT_MCP_TOKEN")
    parser.add_argument("--task", required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--message", required=True)
    parser.add_argument("command", nargs="*", help="the server command, for stdio")
    args = parser.parse_args()

    mode = "auto" if args.mode == "default" else "legacy"
    if args.transport == "stdio":
        if not args.command:
            parser.error("stdio needs the server command after --")
        server = StdioServerParameters(command=args.command[0], args=args.command[1:], env=dict(os.environ))
        client = Client(server, mode=mode)
        http_client = None
    else:
        token = os.environ.get(args.token_env, "")
        http_client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        client = Client(streamable_http_client(args.url, http_client=http_client), mode=mode)

    try:
        async with client:
            report = await exercise(client, args)
    except CheckFailed as failure:
        print(f"FAILED {failure}", flush=True)
        return 1
    finally:
        if http_client is not None:
            await http_client.aclose()
    report["sdk_version"] = importlib.metadata.version("mcp")
    print("REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
