declare const boundary: 'this import crosses the architecture boundary';
export default boundary;
//# sourceMappingURL=tsconfig.boundary.d.ts.map