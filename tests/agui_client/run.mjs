// The official AG-UI client (`@ag-ui/client`'s HttpAgent) against a live `/ag-ui` endpoint.
// tests/test_agui_client.py starts the server and runs this with one scenario; the client itself
// verifies the event order (its verifyEvents stage fails the run on a misplaced event), and this
// script prints what it saw as one JSON line for the test to check.
//
//   node run.mjs conversation URL TOKEN THREAD_ID
//   node run.mjs abort URL TOKEN THREAD_ID
import { HttpAgent } from "@ag-ui/client";

const [scenario, url, token, threadId] = process.argv.slice(2);

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

async function abort() {
  const chat = agent(undefined);
  chat.addMessage({ id: "user-1", role: "user", content: "Tell me a long story." });
  const { seen, subscriber } = recorder();
  subscriber.onTextMessageContentEvent = () => {
    if (!seen.includes("ABORTED")) {
      seen.push("ABORTED");
      setTimeout(() => chat.abortRun(), 0);
    }
  };
  let error = null;
  try {
    await chat.runAgent({ runId: "run-abort" }, subscriber);
  } catch (exc) {
    error = String(exc?.name ?? exc);
  }
  return { events: seen, error, running: chat.isRunning };
}

const scenarios = { conversation, abort };
try {
  const out = await scenarios[scenario]();
  process.stdout.write(JSON.stringify(out) + "\n");
} catch (exc) {
  process.stderr.write(`${exc?.stack ?? exc}\n`);
  process.exit(1);
}
