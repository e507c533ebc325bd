// Architecture boundary. `packages/core` and `packages/raft` import no other package
// of this project, `packages/client` imports none at all, and `packages/cli` only
// the client and the core: their tsconfig.json maps the forbidden package names to
// this file, so such an import fails to compile.
const boundary: 'this import crosses the architecture boundary' = 'see tsconfig.boundary.ts';
export default boundary;
