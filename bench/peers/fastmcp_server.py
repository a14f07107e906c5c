"""The Python peer: a FastMCP server over stdio with the tools the other servers are measured on:
`echo` (as @modelcontextprotocol/server-everything has it) and `get_task`, which reads a task from
the board's REST API (with httpx2, the HTTP client FastMCP itself depends on) as picogent's own `get_task` does (one GET with the bearer token).

Environment: BOARD_URL (e.g. http://127.0.0.1:8700) and TEAMBOARD_TOKEN, for `get_task`."""

import os

import httpx2 as httpx
from fastmcp import FastMCP

mcp = FastMCP("bench-peer")
board = httpx.AsyncClient(
    base_url=os.environ.get("BOARD_URL", "http://127.0.0.1:8700"),
    headers={"Authorization": f"Bearer {os.environ.get('TEAMBOARD_TOKEN', '')}"},
)


@mcp.tool
def echo(message: str) -> str:
    """Echoes back the input."""
    return f"Echo: {message}"


@mcp.tool
async def get_task(task_id: str) -> str:
    """Reads one task by key or id."""
    response = await board.get(f"/api/tasks/{task_id}")
    response.raise_for_status()
    return response.text


if __name__ == "__main__":
    mcp.run(transport="stdio", show_banner=False)
