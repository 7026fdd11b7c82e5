/** TOOL_RESULT_TEMPLATE is conformance/templates/tool_result.tmpl. */
export declare const TOOL_RESULT_TEMPLATE = "{\"status\":{{status|json}},\"tool\":{{tool|json}},\"reason\":{{reason|json}},\"scope\":{{scope|json}},\"may_return_in_ms\":{{may_return_in_ms}},\"alternatives\":{{alternatives|json}}{{#forced}},\"forced\":true{{/forced}}{{#degraded}},\"degraded\":true{{/degraded}}}\n";
/** NOTICE_TEMPLATE is conformance/templates/notice.tmpl. */
export declare const NOTICE_TEMPLATE = "Some tools are out of service and have been removed from your tools for the rest of this task:\n{{#denials}}- {{tool}}: {{#parent}}a service it depends on is out of service: {{/parent}}{{reason}}.{{#testing}} It will not come back during this task.{{/testing}}{{#back_in}} It may be back in about {{back_in}}, but not during this task.{{/back_in}}{{#no_end}} No return time is known.{{/no_end}}{{#degraded}} (Judged by this worker alone: the breaker service is unreachable.){{/degraded}}{{#alternatives}} Instead you can use: {{alternatives|join}}.{{/alternatives}}\n{{/denials}}Continue the task with the tools you still have; do not try to call the removed ones. In your final answer, say which parts of the task could not be done because of them.\n";
/** TOOL_FAILURE_TEMPLATE is conformance/templates/tool_failure.tmpl. */
export declare const TOOL_FAILURE_TEMPLATE = "{{tool}} failed (the failure is recorded). Calling it again right away will most likely fail the same way: continue the task with the tools you still have, and if part of it cannot be done without {{tool}}, say so in your final answer.\n";
/** FALLBACK_DENIALS is conformance/fallback_denials.json: the words of the local fallback's own denials. */
export declare const FALLBACK_DENIALS: {
    readonly open: {
        readonly status: "circuit_open";
        readonly reason: "it is failing: this worker's own calls to it failed repeatedly";
    };
    readonly probe_in_flight: {
        readonly status: "probe_in_flight";
        readonly reason: "it failed and is being tested with a single call; its recovery is not confirmed yet";
    };
};
