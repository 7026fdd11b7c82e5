// The configuration a Client takes from the environment when its options
// leave it out, as service SDKs do (docs/configuration.md, "The clients'
// environment").
import { ConfigError } from "./errors.js";
/** ENV_URL names the variable a Client without urls reads: one URL or several, comma-separated. */
export const ENV_URL = "BREAKERD_URL";
/** ENV_TOKEN names the variable a Client without a token reads. */
export const ENV_TOKEN = "BREAKERD_TOKEN";
/** processEnv is Node's process.env, or nothing where there is no process (a browser). */
function processEnv() {
    return globalThis.process?.env ?? {};
}
/**
 * fromEnvironment fills what the options left out: urls from BREAKERD_URL
 * (a ConfigError naming both when that is unset too), token from
 * BREAKERD_TOKEN. A token given as "" is no token, whatever the
 * environment holds.
 */
export function fromEnvironment(urls, token, env = processEnv()) {
    if (urls === undefined) {
        const list = (env[ENV_URL] ?? "").split(",").map((u) => u.trim()).filter((u) => u !== "");
        if (list.length === 0)
            throw new ConfigError("urls", `none given, and ${ENV_URL} is not set (docs/configuration.md#the-clients-environment)`);
        urls = list;
    }
    if (token === undefined)
        token = env[ENV_TOKEN] || undefined;
    return { urls, token };
}
