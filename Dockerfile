# Sluice: one `deno compile` binary on distroless.
#
# Build:  docker build -t sluice:0.1.0 .
#         docker buildx build --platform linux/amd64,linux/arm64 -t sluice:0.1.0 .
# The builder is the official Deno image at the version pinned in
# tools/toolchain/package.json (it is published for amd64 and arm64, so each
# platform compiles natively); the runtime image has glibc and libgcc_s,
# which the Deno runtime needs, and nothing else: no shell, no package
# manager.
#
# The compile step downloads the `denort` runtime from Deno's release host.
# Where that host is unreachable, put a denort binary of the same version and
# platform in the build context under a name starting with `denort` and pass
# its path there: `docker build --build-arg DENORT_BIN=denort-2.9.6-x86_64 .`
# (deno compile reads DENORT_BIN itself; .dockerignore admits only the
# program's files and `denort*`).

FROM denoland/deno:2.9.6 AS build
ENV DENO_NO_UPDATE_CHECK=1
ARG DENORT_BIN
WORKDIR /src
COPY deno.json deno.lock ./
COPY main.ts ./
COPY lib ./lib
# Same permission set and unstable flags as `deno task start` (see deno.json),
# the Web Worker modules included (serving workers, kubeconfig loader), no V8
# code cache written at run time. The build context is mounted only for a
# given denort binary.
RUN --mount=type=bind,target=/context \
    if [ -n "${DENORT_BIN:-}" ]; then export DENORT_BIN="/context/${DENORT_BIN}"; else unset DENORT_BIN; fi \
    && deno task compile

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/dist/sluice /sluice
# Read-only root filesystem: the binary writes nothing (no code cache; npm
# packages are embedded). DENO_DIR points at /tmp in case Deno opens a cache
# anyway (the Deployment mounts an emptyDir there); no update check.
ENV DENO_DIR=/tmp/deno DENO_NO_UPDATE_CHECK=1 NO_COLOR=1
USER 65532:65532
EXPOSE 8080 8443 10254
ENTRYPOINT ["/sluice"]
