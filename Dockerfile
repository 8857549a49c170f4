# Build the manager binary
# Override BASE_IMAGE to build from another registry, e.g. docker.io/library/golang:1.26
ARG BASE_IMAGE=golang:1.26
# The builder runs on the build machine's platform and cross-compiles for
# TARGETOS/TARGETARCH (make docker-buildx), so no stage runs under emulation.
FROM --platform=${BUILDPLATFORM} ${BASE_IMAGE} AS builder
ARG TARGETOS
ARG TARGETARCH
# The build's version (without the v), commit and commit date, stamped into
# pkg/version (make docker-build passes the Makefile's VERSION, COMMIT, DATE).
ARG VERSION=0.0.0-dev
ARG COMMIT=unknown
ARG DATE=unknown

WORKDIR /workspace
# Copy the Go Modules manifests
COPY go.mod go.mod
COPY go.sum go.sum
# cache deps before building and copying source so that we don't need to re-download as much
# and so that source changes don't invalidate our downloaded layer
RUN go mod download

# Copy the Go source (relies on .dockerignore to filter out tests and non-Go files)
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY pkg/ pkg/

# Build the package ./cmd, never the file cmd/main.go alone (the package has
# more than one file). GOARCH has no default, so the binary matches the
# platform the image is built for. test/install TestDockerfileBuildStage runs
# this stage's COPY and RUN lines on the host, as docker would. Keep each
# RUN on one line: tools that lift the build line read a line, not a
# continuation.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-X github.com/kubefence/kubefence/pkg/version.version=v${VERSION} -X github.com/kubefence/kubefence/pkg/version.commit=${COMMIT} -X github.com/kubefence/kubefence/pkg/version.date=${DATE}" -o manager ./cmd
# The kubectl fence plugin, for the chart's `helm test` Pod (kubectl fence
# check --wait) and for operators who exec into the image.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-X github.com/kubefence/kubefence/pkg/version.version=v${VERSION} -X github.com/kubefence/kubefence/pkg/version.commit=${COMMIT} -X github.com/kubefence/kubefence/pkg/version.date=${DATE}" -o kubectl-fence ./cmd/kubectl-fence

# Use distroless as minimal base image to package the manager binary
# Refer to https://github.com/GoogleContainerTools/distroless for more details
FROM gcr.io/distroless/static:nonroot
ARG VERSION=0.0.0-dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="kubefence manager" \
      org.opencontainers.image.version="v${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.licenses="Apache-2.0"
WORKDIR /
COPY --from=builder /workspace/manager .
COPY --from=builder /workspace/kubectl-fence .
USER 65532:65532

ENTRYPOINT ["/manager"]
