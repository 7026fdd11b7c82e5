// A scripted Model for the OpenAI Agents SDK (@openai/agents): the
// framework tests run the real Runner against it, with no network.

import { Usage, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";

/** ScriptedModel answers the Agents SDK's requests: `calls` calls of the refund tool while it has it, then text. */
export class ScriptedModel implements Model {
  readonly requests: ModelRequest[] = [];
  constructor(private readonly calls = 1) {}
  async getResponse(req: ModelRequest): Promise<ModelResponse> {
    this.requests.push(req);
    const names = req.tools.map((t) => t.name);
    const made = Array.isArray(req.input) ? req.input.filter((i) => i.type === "function_call_result").length : 0;
    if (names.includes("refund_charge") && made < this.calls) {
      return { usage: new Usage(), output: [{ type: "function_call", callId: `c${made}`, name: "refund_charge", arguments: "{}", status: "completed" }] };
    }
    return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }] };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error("not scripted");
  }
}
