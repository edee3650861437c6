// A Babel plugin that runs before @babel/plugin-transform-modules-commonjs in jest's ES-module-to-
// CommonJS step (jest.config.js), for what NestJS 12's packages do that the transform alone gets
// wrong once the whole application is loaded in jest (test/support/in-process.ts):
// - `import('pkg')` (Nest loads class-validator, @fastify/static and others so): jest's CommonJS
//   sandbox has no dynamic import, so it must become a require(). The transform does that only
//   when @babel/plugin-transform-dynamic-import has set this flag, and that plugin does nothing
//   else, so it is set here rather than adding a package for one line.
// - a module's own top-level `require` (`const require = createRequire(import.meta.url)`, in
//   @nestjs/swagger): the transform takes it for the module system's and calls it before that line
//   has run ("Cannot access '_require' before initialization"). Renamed first, the name is free.
module.exports = function esmToCjs() {
  return {
    name: 'esm-to-cjs-in-jest',
    pre() {
      this.file.set('@babel/plugin-proposal-dynamic-import', '7.0.0');
    },
    visitor: {
      Program(path) {
        if (path.scope.hasOwnBinding('require')) path.scope.rename('require', path.scope.generateUid('moduleRequire'));
      },
    },
  };
};
