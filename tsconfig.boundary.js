// Architecture boundary. `packages/core` and `packages/raft` import no other package
// of this project, and `packages/client` imports none at all: their tsconfig.json
// maps the forbidden package names to this file, so such an import fails to compile.
const boundary = 'see tsconfig.boundary.ts';
export default boundary;
//# sourceMappingURL=tsconfig.boundary.js.map