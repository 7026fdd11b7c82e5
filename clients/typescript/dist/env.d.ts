/** ENV_URL names the variable a Client without urls reads: one URL or several, comma-separated. */
export declare const ENV_URL = "BREAKERD_URL";
/** ENV_TOKEN names the variable a Client without a token reads. */
export declare const ENV_TOKEN = "BREAKERD_TOKEN";
/** Env is a process's environment, as Node's process.env holds it. */
export type Env = Readonly<Record<string, string | undefined>>;
/**
 * fromEnvironment fills what the options left out: urls from BREAKERD_URL
 * (a ConfigError naming both when that is unset too), token from
 * BREAKERD_TOKEN. A token given as "" is no token, whatever the
 * environment holds.
 */
export declare function fromEnvironment(urls: string | readonly string[] | undefined, token: string | undefined, env?: Env): {
    urls: string | readonly string[];
    token: string | undefined;
};
