// The Node peer: a server on the official TypeScript SDK (@modelcontextprotocol/sdk, the one
// @modelcontextprotocol/server-everything is built on) over stdio, with the tools the other
// servers are measured on: `echo` (as server-everything has it) and `get_task`, which reads a task
// from the board's REST API as picogent's own `get_task` does (one GET with the bearer token, over
// a kept-alive connection) and answers the tracker's JSON as text, like the FastMCP peer.
//
// Environment: BOARD_URL (e.g. http://127.0.0.1:8700) and TEAMBOARD_TOKEN, for `get_task`.
// BENCH_NODE_HTTP=fetch uses the global fetch (undici) instead of node:http; node:http is the
// default because it was the faster of the two here (docs/performance.md).

import http from "node:http";

import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const boardUrl = new URL(process.env.BOARD_URL ?? "http://127.0.0.1:8700");
const headers = { Authorization: `Bearer ${process.env.TEAMBOARD_TOKEN ?? ""}`, Accept: "application/json" };
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function getWithHttp(path) {
    return new Promise((resolve, reject) => {
        const request = http.get(
            { hostname: boardUrl.hostname, port: boardUrl.port, path, headers, agent },
            (response) => {
                const chunks = [];
                response.on("data", (chunk) => chunks.push(chunk));
                response.on("end", () => {
                    const text = Buffer.concat(chunks).toString("utf8");
                    if (response.statusCode !== 200) {
                        reject(new Error(`the board answered ${response.statusCode}: ${text}`));
                    } else {
                        resolve(text);
                    }
                });
                response.on("error", reject);
            },
        );
        request.on("error", reject);
    });
}

async function getWithFetch(path) {
    const response = await fetch(new URL(path, boardUrl), { headers });
    const text = await response.text();
    if (!response.ok) {
        throw new Error(`the board answered ${response.status}: ${text}`);
    }
    return text;
}

const get = process.env.BENCH_NODE_HTTP === "fetch" ? getWithFetch : getWithHttp;

const server = new McpServer({ name: "bench-peer-node", version: "0.1.0" });

server.registerTool(
    "echo",
    {
        title: "Echo Tool",
        description: "Echoes back the input string",
        inputSchema: { message: z.string().describe("Message to echo") },
    },
    async ({ message }) => ({ content: [{ type: "text", text: `Echo: ${message}` }] }),
);

server.registerTool(
    "get_task",
    {
        title: "Get task",
        description: "Reads one task by key or id.",
        inputSchema: { task_id: z.string().describe("The task's key (e.g. TE-15) or id") },
    },
    async ({ task_id }) => {
        const text = await get(`/api/tasks/${encodeURIComponent(task_id)}`);
        return { content: [{ type: "text", text }] };
    },
);

await server.connect(new StdioServerTransport());
