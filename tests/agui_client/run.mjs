// The official AG-UI client (`@ag-ui/client`'s HttpAgent) against a live `/ag-ui` endpoint.
// tests/test_agui_client.py starts the server and runs this with one scenario; the client itself
// verifies the event order (its verifyEvents stage fails the run on a misplaced event), and this
// script prints what it saw as one JSON line for the test to check.
//
//   node run.mjs conversation URL TOKEN THREAD_ID
//   node run.mjs frontend URL TOKEN THREAD_ID      (a server tool, a frontend tool answered by the client, state)
//   node run.mjs abort URL TOKEN THREAD_ID [EVENT]   (aborts on the first EVENT, TEXT_MESSAGE_CONTENT by default)
import { HttpAgent } from "@ag-ui/client";

const [scenario, url, token, threadId, abortOn = "TEXT_MESSAGE_CONTENT"] = process.argv.slice(2);

function agent(state) {
  return new HttpAgent({
    url: `${url}/ag-ui/chat`,
    headers: { Authorization: `Bearer ${token}` },
    threadId,
    initialState: state,
    initialMessages: [],
  });
}

function recorder() {
  const seen = [];
  return {
    seen,
    subscriber: { onEvent: ({ event }) => void seen.push(event.type) },
  };
}

async function conversation() {
  const chat = agent({ cities: [] });
  const runs = [];
  for (const text of ["Weather in Oslo?", "Thanks!"]) {
    chat.addMessage({ id: `user-${runs.length + 1}`, role: "user", content: text });
    const { seen, subscriber } = recorder();
    const result = await chat.runAgent({ runId: `run-${runs.length + 1}` }, subscriber);
    runs.push({ events: seen, result: result.result, newMessages: result.newMessages.length });
  }
  const messages = chat.messages.map((m) => ({
    role: m.role,
    content: typeof m.content === "string" ? m.content : null,
    toolCalls: (m.toolCalls ?? []).map((c) => ({ name: c.function.name, arguments: c.function.arguments })),
  }));
  return { runs, state: chat.state, messages };
}

// A server tool, a frontend tool and state: the first run ends with the frontend call pending, the page
// answers it with a tool message, and the second run resumes the thread and streams on.
async function frontend() {
  const chat = agent({ cities: [] });
  const tools = [
    {
      name: "confirm",
      description: "Ask the person to confirm a booking",
      parameters: { type: "object", properties: { question: { type: "string" } }, required: ["question"] },
    },
  ];
  chat.addMessage({ id: "user-1", role: "user", content: "Book Oslo if sunny." });
  const runs = [];
  for (let i = 1; i <= 2; i++) {
    const { seen, subscriber } = recorder();
    const result = await chat.runAgent({ runId: `run-${i}`, tools }, subscriber);
    runs.push({ events: seen, result: result.result });
    if (i === 1) {
      const asked = chat.messages.flatMap((m) => m.toolCalls ?? []).find((c) => c.function.name === "confirm");
      chat.addMessage({ id: "tool-1", role: "tool", toolCallId: asked.id, content: "yes, book it" });
    }
  }
  const messages = chat.messages.map((m) => ({ role: m.role, content: typeof m.content === "string" ? m.content : null }));
  return { runs, state: chat.state, messages };
}

async function abort() {
  const chat = agent(undefined);
  chat.addMessage({ id: "user-1", role: "user", content: "Tell me a long story." });
  const seen = [];
  const subscriber = {
    onEvent: ({ event }) => {
      seen.push(event.type);
      if (event.type === abortOn && !seen.includes("ABORTED")) {
        seen.push("ABORTED");
        setTimeout(() => chat.abortRun(), 0);
      }
    },
  };
  let error = null;
  try {
    await chat.runAgent({ runId: "run-abort" }, subscriber);
  } catch (exc) {
    error = String(exc?.name ?? exc);
  }
  return { events: seen, error, running: chat.isRunning };
}

const scenarios = { conversation, abort, frontend };
try {
  const out = await scenarios[scenario]();
  process.stdout.write(JSON.stringify(out) + "\n");
} catch (exc) {
  process.stderr.write(`${exc?.stack ?? exc}\n`);
  process.exit(1);
}
