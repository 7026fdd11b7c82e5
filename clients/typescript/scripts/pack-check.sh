#!/usr/bin/env bash
# The package as a user gets it, checked from clients/typescript:
#   1. the committed dist/ is what `npm run build` writes from src/ (no
#      file more, none less, none different), since `npm install <path>`
#      of a clone uses it as it is;
#   2. `npm publish --dry-run` passes with no warning but the login one,
#      and the tarball holds dist/, README.md, LICENSE (the repository's)
#      and package.json with repository, homepage and bugs;
#   3. the tarball, then this directory as committed (a fresh clone's,
#      `npm install <path>`), each installed into a fresh folder: imported
#      from ESM, required from CommonJS, and typed under --strict, with no
#      dependency pulled in (@breakerd/client/openai-agents imports its
#      framework, an optional peer dependency, so it is left out here; the
#      adapter tests use it inside the framework).
set -euo pipefail
here=$(pwd)
root=$(cd ../.. && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. dist/ is current.
"$here/node_modules/.bin/tsc" -p tsconfig.json --outDir "$tmp/dist"
if ! diff -r "$tmp/dist" dist >"$tmp/dist.diff"; then
  head -20 "$tmp/dist.diff"
  echo "pack-check: the committed dist/ is not what npm run build writes: run it and commit dist/"; exit 1
fi
if [ -n "$(git -C "$root" status --porcelain -- clients/typescript/dist)" ]; then
  git -C "$root" status --short -- clients/typescript/dist | head
  echo "pack-check: dist/ differs from the commit: commit what npm run build wrote"; exit 1
fi
echo "pack-check: dist/ is what npm run build writes"

# 2. publish --dry-run, and what the tarball holds.
npm publish --dry-run >"$tmp/publish.log" 2>&1 || { cat "$tmp/publish.log"; echo "pack-check: npm publish --dry-run failed"; exit 1; }
if grep 'npm warn' "$tmp/publish.log" | grep -v 'requires you to be logged in'; then
  echo "pack-check: npm publish --dry-run warned"; exit 1
fi
npm pack --silent --pack-destination "$tmp" >/dev/null
tarball=$(ls "$tmp"/breakerd-client-*.tgz)
tar -tzf "$tarball" | sort > "$tmp/files"
if grep -E 'package/(src|test|build|node_modules|scripts)/' "$tmp/files"; then echo "pack-check: the tarball carries files it must not"; exit 1; fi
for f in package/LICENSE package/README.md package/package.json package/dist/index.js package/dist/index.d.ts; do
  grep -qx "$f" "$tmp/files" || { echo "pack-check: the tarball lacks $f"; exit 1; }
done
tar -xzOf "$tarball" package/LICENSE | cmp -s - "$root/LICENSE" || { echo "pack-check: the tarball's LICENSE is not the repository's"; exit 1; }
tar -xzOf "$tarball" package/package.json | node -e '
  const p = JSON.parse(require("fs").readFileSync(0, "utf8"));
  for (const k of ["repository", "homepage", "bugs", "license", "engines"]) if (!p[k]) throw new Error(`package.json lacks ${k}`);
  for (const [k, v] of Object.entries(p.peerDependencies ?? {})) if (!p.peerDependenciesMeta?.[k]?.optional) throw new Error(`peer dependency ${k} (${v}) is not optional`);
  for (const [k, v] of Object.entries(p.exports)) if (typeof v === "object" && v.require !== v.import) throw new Error(`exports ${k}: require is not import`);'
grep -E '\]\(\.|\]\([a-z-]+\.md' <(tar -xzOf "$tarball" package/README.md) && { echo "pack-check: the tarball's README has relative links"; exit 1; }
echo "pack-check: npm publish --dry-run passes; the tarball holds $(wc -l < "$tmp/files") files, LICENSE, README.md and package.json with repository, homepage and bugs"

# 3. Installed two ways, each used from ESM, CommonJS and TypeScript.
git -C "$root" archive --prefix=clone/ HEAD clients/typescript | tar -x -C "$tmp"
install_and_use() { # how what: a fresh app installs what, then uses it
  local app="$tmp/app-$1"
  mkdir "$app"
  cd "$app"
  printf '{"name":"app","private":true,"type":"module"}\n' > package.json
  npm install --silent --no-audit --no-fund "$2"
  if [ -n "$(ls node_modules | grep -v '^@breakerd$' | grep -v '^\.')" ]; then echo "pack-check: installing pulled in dependencies: $(ls node_modules)"; exit 1; fi
  cat > main.mjs <<'JS'
import { Client, CircuitOpenError, Run } from "@breakerd/client";
import { toolsForRun } from "@breakerd/client/ai";
import { runTool } from "@breakerd/client/tools";
const c = new Client({ urls: "http://127.0.0.1:7071", workerId: "w" });
for (const f of [Client, CircuitOpenError, Run, toolsForRun, runTool]) if (typeof f !== "function") throw new Error("missing export");
console.log("imports:", c.workerId, new Run(c).notice() === "");
JS
  cat > main.cjs <<'JS'
const { Client, CircuitOpenError, Run } = require("@breakerd/client");
const { toolsForRun } = require("@breakerd/client/ai");
const { runTool } = require("@breakerd/client/tools");
const esm = require("@breakerd/client/package.json");
const c = new Client({ urls: "http://127.0.0.1:7071", workerId: "w" });
for (const f of [Client, CircuitOpenError, Run, toolsForRun, runTool]) if (typeof f !== "function") throw new Error("missing export");
console.log("requires:", c.workerId, new Run(c).notice() === "", esm.name);
JS
  cat > main.ts <<'TS'
import { Client, type Permit } from "@breakerd/client";
import { guardTools } from "@breakerd/client/ai";
const c: Client = new Client({ urls: ["http://127.0.0.1:7071"], workerId: "w" });
const p: Promise<Permit> = c.allow("b", { tool: "t" });
void p;
void guardTools;
TS
  node main.mjs
  node main.cjs 2>"$app/stderr" || { cat "$app/stderr"; echo "pack-check: require() of the package failed on node $(node --version)"; exit 1; }
  [ ! -s "$app/stderr" ] || { cat "$app/stderr"; echo "pack-check: require() of the package warned"; exit 1; }
  "$here/node_modules/.bin/tsc" --strict --noEmit --module nodenext --moduleResolution nodenext --target es2022 --lib es2022,dom main.ts
  echo "pack-check: $1: imported, required (node $(node --version)) and typed under --strict"
  cd "$here"
}
install_and_use tarball "$tarball"
install_and_use "npm-install-path" "$tmp/clone/clients/typescript"
