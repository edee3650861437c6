# The service image: build with dev dependencies, run with production ones as an unprivileged user.
# The benchmark (bench/), the tests and their harness (harness/) are dev tools: none is copied, built or installed here
# (only bench/package.json, the manifest of a workspace that npm ci reads).
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# The benchmark is a workspace of the lockfile: npm ci needs its manifest, none of its code.
COPY bench/package.json ./bench/
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json nest-cli.json ./
COPY src ./src
COPY migrations ./migrations
RUN npx nest build

FROM node:24-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY package.json package-lock.json ./
COPY bench/package.json ./bench/
RUN npm ci --omit=dev --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY lua ./lua
USER node
EXPOSE 3000
CMD ["node", "--max-old-space-size=128", "--max-semi-space-size=8", "dist/src/main.js"]
