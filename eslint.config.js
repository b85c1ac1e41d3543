// Lint is part of the test command. Architecture rules live here: a part may only reach another
// part through that part's public entry (index.ts), so the folder layout stays the diagram.
import tseslint from "typescript-eslint";

const parts = ["api", "kube", "operator", "agent", "forge", "cli", "shared", "devcluster"];

export default tseslint.config(
  { ignores: ["node_modules/**", "dist/**", ".cache/**", "guest/**", "**/gen/**", "bin/**"] },
  ...tseslint.configs.recommended,
  {
    files: ["**/*.ts"],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      "@typescript-eslint/no-floating-promises": [
        "error",
        // node:test's describe/it return promises the runner itself awaits.
        { allowForKnownSafeCalls: [{ from: "package", package: "node:test", name: ["describe", "it", "test", "suite"] }] },
      ],
      "@typescript-eslint/no-misused-promises": "error",
      "@typescript-eslint/await-thenable": "error",
      "@typescript-eslint/consistent-type-imports": "error",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      // Each part's error-codes.ts adds its list to shared's ImpErrorCodes as `interface … extends Record<…> {}`.
      "@typescript-eslint/no-empty-object-type": ["error", { allowInterfaces: "with-single-extends" }],
      "no-restricted-syntax": [
        "error",
        { selector: "TSEnumDeclaration", message: "Use a string-literal union and an `as const` table." },
      ],
    },
  },
  // Each part may reach the other parts only through their index.ts.
  ...parts.map((part) => ({
    files: [`src/${part}/**/*.ts`],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: parts
            .filter((other) => other !== part)
            .map((other) => ({
              // Only paths that leave the importing part (`../…/other/`): a part may have a
              // subfolder named like another part.
              regex: `^(\\.\\./)+${other}/(?!index\\.ts$).+`,
              message: `Import src/${other} through its index.ts, not its internals.`,
            })),
        },
      ],
    },
  })),
);
