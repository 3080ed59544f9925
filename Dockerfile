# Sluice: one `deno compile` binary on distroless.
#
# Build:  docker build -t sluice .
# The builder uses the official Deno image at the version pinned in
# tools/toolchain/package.json; the runtime image has glibc and libgcc_s,
# which the Deno runtime needs, and nothing else.

FROM denoland/deno:2.9.6 AS build
WORKDIR /src
COPY deno.json deno.lock ./
COPY main.ts ./
COPY lib ./lib
# Same permission set and flags as `deno task start` (see deno.json).
RUN deno task compile

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/dist/sluice /sluice
USER 65532:65532
EXPOSE 8080 8443 10254
ENTRYPOINT ["/sluice"]
