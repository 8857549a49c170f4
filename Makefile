# kubefence Makefile: kubebuilder's target names, grouped by `make help`.

# Kubernetes version of the control plane the tests run against (kube-apiserver, etcd, kubectl).
ENVTEST_K8S_VERSION ?= 1.37.2
CONTAINER_TOOL ?= docker

# Version stamping (pkg/version). VERSION is the release without its v (make
# release VERSION=0.1.0); by default git describe's for the nearest tag vX.Y.Z
# (0.1.0, 0.1.0-3-gabc1234 between tags, -dirty for a modified tree), or
# 0.0.0-dev when there is no tag. COMMIT is the git commit (-dirty for a
# modified tree) and DATE the commit's time (UTC), so that rebuilding one
# commit gives the same bytes. The binaries print v$(VERSION).
ifeq ($(origin VERSION),undefined)
VERSION := $(or $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null | sed 's/^v//'),0.0.0-dev)
endif
ifeq ($(origin COMMIT),undefined)
COMMIT := $(or $(shell git rev-parse HEAD 2>/dev/null),unknown)$(if $(shell git status --porcelain --untracked-files=no 2>/dev/null),-dirty)
endif
ifeq ($(origin DATE),undefined)
DATE := $(or $(shell TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD 2>/dev/null),unknown)
endif
VERSION_PKG := github.com/kubefence/kubefence/pkg/version
LDFLAGS := -X $(VERSION_PKG).version=v$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).date=$(DATE)

# The manager image. kubefence has no default image (docs/operations.md#image):
# set IMAGE_REPO (registry/name, e.g. registry.example.com/kubefence; the
# image is then IMAGE_REPO:vVERSION) or IMG (the whole reference). deploy,
# build-installer, docker-build, docker-push and docker-buildx stop with an
# error naming them when neither is set; release needs IMAGE_REPO.
IMAGE_REPO ?=
IMG ?= $(if $(IMAGE_REPO),$(IMAGE_REPO):v$(VERSION))
IMAGE_GOALS := deploy build-installer docker-build docker-push docker-buildx
ifneq ($(filter $(IMAGE_GOALS),$(MAKECMDGOALS)),)
ifeq ($(strip $(IMG)),)
$(error IMG is not set: kubefence has no default image. Set IMAGE_REPO=<registry>/<name> (the image is then <registry>/<name>:v$(VERSION)) or IMG=<registry>/<name>:<tag>, naming an image you built and pushed (make docker-build docker-push IMAGE_REPO=...); see docs/operations.md#image)
endif
endif
# IMAGE_PLACEHOLDER is the image config/manager names when none is set: a host
# under .invalid (RFC 6761) that no registry can serve.
IMAGE_PLACEHOLDER := image-not-set.invalid/kubefence

# Go settings
GOBIN ?= $(shell go env GOPATH)/bin
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

.PHONY: demo
demo: manifests setup-envtest ## Play the seeds' story with real processes: a paused lease holder's late write is refused by the API server (DEMO_ARGS=--keep keeps it running for kubectl).
	@KUBEBUILDER_ASSETS="$$(./hack/setup-envtest.sh | tail -n1)" go run ./hack/demo $(DEMO_ARGS)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate CRDs, RBAC and webhook configuration into config/.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd webhook paths="./..." output:crd:artifacts:config=config/crd/bases

.PHONY: generate
generate: controller-gen ## Generate DeepCopy methods.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

.PHONY: verify-generated
verify-generated: manifests generate ## Fail when committed generated files differ from what the generators write.
	@if [ -n "$$(git status --porcelain -- config/crd/bases config/rbac/role.yaml config/webhook/manifests.yaml api)" ]; then \
		echo "generated files are out of date; run 'make manifests generate' and commit:"; \
		git status --porcelain -- config/crd/bases config/rbac/role.yaml config/webhook/manifests.yaml api; \
		git --no-pager diff -- config/crd/bases config/rbac/role.yaml config/webhook/manifests.yaml api | head -50; \
		exit 1; \
	fi

.PHONY: verify-fmt
verify-fmt: ## Fail when gofmt would change a file.
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: verify-mod
verify-mod: ## Fail when go.mod or go.sum is not tidy (go mod tidy -diff).
	go mod tidy -diff

.PHONY: lint
lint: golangci-lint ## Run golangci-lint with .golangci.yml.
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...

.PHONY: verify
verify: verify-fmt verify-mod vet lint ## Check formatting, go.mod, vet and lint (what make test checks before the tests).

# TEST_P is how many packages make test runs at once (go test -p; Go's default
# is the number of cores). The envtest suites mostly wait on real time (lease
# expiries, hand-overs, fault gaps, control-plane starts) rather than compute:
# a whole warm make test uses about 11 CPU-minutes in 6 wall-minutes on 2
# cores. TEST_FIRST lists every package that takes over 20 s, about longest first,
# so that go test (which starts packages in the order given) never starts a
# long one last: test/heartbeat (1 min 38 s), left out of this list, started
# last and alone held the run 64 s past the others (2 December 2026). Keep a
# new long suite in this list, at its place by time (test/README.md's map).
# TEST_FUZZTIME is make test's FUZZTIME (make fuzz alone: 10s); each fuzz
# target's seed corpus also runs as a test in the package run.
TEST_P ?= 5
TEST_FIRST ?= ./test/faults/ ./test/history/ ./test/install/ ./test/enforcement/ ./test/operator/ ./test/upgrade/ ./test/heartbeat/ ./test/tenure/ ./test/cleanup/ ./test/explorer/ ./controllers/policy/ ./cmd/kubectl-fence/ ./test/example/
TEST_FUZZTIME ?= 5s

.PHONY: test
test: manifests generate verify kustomize helm gotestsum setup-envtest tmux ## Regenerate, verify, then run all tests against a real kube-apiserver and etcd (one line per package with its duration; GOTESTSUM_FORMAT=testname for one per test; CI also runs verify-generated).
	KUBEBUILDER_ASSETS="$$(./hack/setup-envtest.sh | tail -n1)" $(GOTESTSUM) --format $(GOTESTSUM_FORMAT) -- $(TEST_FIRST) ./... -count=1 -p $(TEST_P) -timeout 30m $(TEST_ARGS)
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME)

.PHONY: test-plugin
test-plugin: setup-envtest tmux ## Run the kubectl fence plugin's tests only (completion is tested in bash under tmux).
	KUBEBUILDER_ASSETS="$$(./hack/setup-envtest.sh | tail -n1)" go test ./cmd/kubectl-fence/ -count=1 -timeout 10m $(TEST_ARGS)

.PHONY: tmux
tmux: ## Install tmux and bash-completion (the plugin's completion test drives bash with kubectl's completion in tmux) with apt-get when missing.
	@if ! command -v tmux >/dev/null 2>&1 || [ ! -f /usr/share/bash-completion/bash_completion ]; then \
		echo "installing tmux and bash-completion with apt-get (the plugin's completion test needs them)"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq tmux bash-completion >/dev/null; \
	fi
	@command -v tmux >/dev/null 2>&1 || { echo "tmux could not be installed: install it with your package manager"; exit 1; }
	@[ -f /usr/share/bash-completion/bash_completion ] || { echo "bash-completion could not be installed: install it with your package manager"; exit 1; }

.PHONY: test-unit
test-unit: ## Run every test that needs no API server and no tool but Go (go test -short; seconds when cached, under a minute on 2 cores; test/README.md maps the tiers).
	go test -short ./... $(TEST_ARGS)

HISTORY_WRITES ?= 100000
HISTORY_FAULTS ?= 1000

.PHONY: soak
soak: setup-envtest ## Run the history test's soak profile (HISTORY_WRITES, HISTORY_FAULTS; HISTORY_DURATION, HISTORY_SEED, HISTORY_ARTIFACTS pass through; about 45 min; see docs/reliability.md).
	KUBEBUILDER_ASSETS="$$(./hack/setup-envtest.sh | tail -n1)" HISTORY_PROFILE=soak HISTORY_WRITES=$(HISTORY_WRITES) HISTORY_FAULTS=$(HISTORY_FAULTS) go test ./test/history/ -run '^TestHistory$$' -count=1 -timeout 0 -v

.PHONY: soak-explorer
soak-explorer: ## Run the protocol explorer with its large bounds (EXPLORER_BOUND=large; test/explorer, see docs/reliability.md "Protocol explorer").
	EXPLORER_BOUND=large go test ./test/explorer/ -count=1 -timeout 0 -v -run '^Test'

.PHONY: explorer-reverts
explorer-reverts: ## Check that the protocol explorer finds findings 1, 2 and 4 of the 2026-12-01 review, its own (a write admitted again after its client gave up), and the heartbeat rules (heartbeatLagged, the live read before removal), with each fix reverted in turn (hack/explorer-revert.sh, on a copy of the tree; EXPLORER_BOUND passes through).
	./hack/explorer-revert.sh f1
	./hack/explorer-revert.sh f2
	./hack/explorer-revert.sh f4
	./hack/explorer-revert.sh f-readmit
	./hack/explorer-revert.sh hb-lagged
	./hack/explorer-revert.sh hb-live

FUZZTIME ?= 10s

.PHONY: fuzz
fuzz: ## Run each fuzz test for FUZZTIME (default 10s) on top of its committed seed corpus.
	go test ./controllers/webhooks/fencing/ -run '^$$' -fuzz '^FuzzDecide$$' -fuzztime $(FUZZTIME)
	go test ./controllers/webhooks/fencedlease/ -run '^$$' -fuzz '^FuzzValidateUpdate$$' -fuzztime $(FUZZTIME)

.PHONY: bench
bench: setup-envtest ## Run the benchmarks against a real kube-apiserver and print tables.
	KUBEBUILDER_ASSETS="$$(./hack/setup-envtest.sh | tail -n1)" go run ./test/bench $(BENCH_ARGS)

SCALE_ARGS ?=

.PHONY: bench-scale
bench-scale: setup-envtest ## Run the scale benchmark: 10,000 FencedLeases, H held through pkg/fence with webhooks on, then client-go Leases (SCALE_ARGS, e.g. -scale-steady=1m; see docs/benchmarks.md).
	KUBEBUILDER_ASSETS="$$(./hack/setup-envtest.sh | tail -n1)" go run ./test/bench -only=scale -timeout=90m $(SCALE_ARGS)

##@ Build

.PHONY: build
build: manifests generate fmt vet ## Build the manager binary and the kubectl plugin, stamped with VERSION, COMMIT and DATE (bin/manager --version).
	go build -ldflags "$(LDFLAGS)" -o bin/manager ./cmd
	go build -ldflags "$(LDFLAGS)" -o bin/kubectl-fence ./cmd/kubectl-fence

.PHONY: install-plugin
install-plugin: ## Install the kubectl fence plugin and its completion shim kubectl_complete-fence into GOBIN (put GOBIN on PATH, then: kubectl fence get).
	go build -ldflags "$(LDFLAGS)" -o $(GOBIN)/kubectl-fence ./cmd/kubectl-fence
	install -m 0755 cmd/kubectl-fence/kubectl_complete-fence $(GOBIN)/kubectl_complete-fence

.PHONY: run
run: manifests generate fmt vet ## Run the controller from your host against the current kubeconfig.
	go run -ldflags "$(LDFLAGS)" ./cmd

.PHONY: docker-build
docker-build: ## Build the manager image IMG (stamped with VERSION, COMMIT and DATE).
	$(CONTAINER_TOOL) build $(DOCKER_BUILD_ARGS) -t ${IMG} .

.PHONY: docker-push
docker-push: ## Push the manager image.
	$(CONTAINER_TOOL) push ${IMG}

DOCKER_BUILD_ARGS = --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) --build-arg DATE=$(DATE)

# kustomize-build-image builds the kustomize directory $(1) with the manager
# image IMG, through a temporary overlay under dist/ (kustomize takes only
# relative paths): config/ itself is never edited.
define kustomize-build-image
mkdir -p dist; d="$$(mktemp -d dist/kustomize.XXXXXX)"; trap 'rm -rf "$$d"' EXIT; \
printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../../%s\n' "$(1)" > "$$d/kustomization.yaml"; \
(cd "$$d" && $(KUSTOMIZE) edit set image $(IMAGE_PLACEHOLDER)=$(IMG)); \
$(KUSTOMIZE) build "$$d"
endef

# INSTALL_YAML is the file build-installer writes.
INSTALL_YAML ?= dist/install.yaml

.PHONY: build-installer
build-installer: manifests generate kustomize ## Write a single install manifest naming IMG (or IMAGE_REPO:vVERSION) to INSTALL_YAML (dist/install.yaml).
	@{ $(call kustomize-build-image,config/default); } > $(INSTALL_YAML).tmp && mv $(INSTALL_YAML).tmp $(INSTALL_YAML)
	@echo "wrote $(INSTALL_YAML) (image $(IMG))"

##@ Release (docs/operations.md#releasing)

# PROJECT_URL is the project's home (e.g. https://github.com/<org>/kubefence):
# the krew manifest's homepage and the packaged chart's home. No default: the
# project owns no public coordinates yet (docs/operations.md#image).
PROJECT_URL ?=
# RELEASE_DOWNLOAD_URL is where the release folder's files are downloadable
# (the krew manifest's uris): GitHub's release download URL by default.
RELEASE_DOWNLOAD_URL ?= $(PROJECT_URL)/releases/download/v$(VERSION)
# RELEASE_DIR is the folder make release writes (emptied first).
RELEASE_DIR ?= dist/release/v$(VERSION)

ifneq ($(filter release,$(MAKECMDGOALS)),)
ifeq ($(shell echo '$(VERSION)' | grep -Eq '^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$$' && echo ok),)
$(error VERSION=$(VERSION) is not a release version: expected MAJOR.MINOR.PATCH without the v, e.g. make release VERSION=0.1.0 (or 0.1.0-rc.1))
endif
ifeq ($(strip $(IMAGE_REPO)),)
$(error IMAGE_REPO is not set: make release names the image IMAGE_REPO:v$(VERSION) in install.yaml and the chart, e.g. IMAGE_REPO=registry.example.com/kubefence (kubefence has no default image, docs/operations.md#image))
endif
override IMG := $(IMAGE_REPO):v$(VERSION)
ifeq ($(strip $(PROJECT_URL)),)
$(error PROJECT_URL is not set: make release needs the project's home for the krew manifest and the chart, e.g. PROJECT_URL=https://github.com/<org>/kubefence)
endif
endif

.PHONY: release
release: manifests kustomize helm ## Write the release assets of VERSION (x.y.z; IMAGE_REPO, PROJECT_URL required) into RELEASE_DIR: install.yaml, install-policy.yaml, the chart, krew archives and manifest, release notes, checksums.txt.
	rm -rf $(RELEASE_DIR) && mkdir -p $(RELEASE_DIR)
	{ $(call kustomize-build-image,config/default); } > $(RELEASE_DIR)/install.yaml
	{ $(call kustomize-build-image,config/policy); } > $(RELEASE_DIR)/install-policy.yaml
	go run ./hack/release -version $(VERSION) -out $(RELEASE_DIR) -image-repo $(IMAGE_REPO) \
		-homepage $(PROJECT_URL) -download-url $(RELEASE_DOWNLOAD_URL) -helm $(HELM) \
		-ldflags "$(LDFLAGS)" -date $(DATE)
	@echo "release v$(VERSION) in $(RELEASE_DIR) (image $(IMG)): upload every file (release-notes.md is also the release text)"

##@ Deployment

ifndef ignore-not-found
  ignore-not-found = false
endif

.PHONY: install
install: manifests kustomize ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply -f -

.PHONY: uninstall
uninstall: manifests kustomize ## Uninstall the CRDs. Call with ignore-not-found=true to ignore missing resources.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) -f -

.PHONY: deploy
deploy: manifests kustomize ## Deploy the operator with the image IMG (or IMAGE_REPO:vVERSION) to the cluster of the current kubeconfig (DEPLOY_CONFIG=config/cert-manager for cert-manager certificates).
	{ $(call kustomize-build-image,$(DEPLOY_CONFIG)); } | $(KUBECTL) apply -f -

.PHONY: undeploy
undeploy: kustomize ## Undeploy the operator, keeping the CRD (token history) unless KEEP_HISTORY=false. ignore-not-found=true ignores missing resources.
	$(KUSTOMIZE) build $(DEPLOY_CONFIG) | $(KUBECTL) delete --ignore-not-found=$(ignore-not-found) --wait=$(UNDEPLOY_WAIT) $(UNDEPLOY_SELECTOR) -f -

##@ Dependencies

LOCALBIN ?= $(shell pwd)/bin
$(LOCALBIN):
	mkdir -p $(LOCALBIN)

KUBECTL ?= kubectl
KUSTOMIZE ?= $(LOCALBIN)/kustomize
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen
SETUP_ENVTEST ?= $(LOCALBIN)/setup-envtest
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint

KUSTOMIZE_VERSION ?= v5.8.2
CONTROLLER_TOOLS_VERSION ?= v0.23.0
SETUP_ENVTEST_VERSION ?= v0.25.1
GOLANGCI_LINT_VERSION ?= v2.15.0

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Install kustomize into ./bin.
$(KUSTOMIZE): | $(LOCALBIN)
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Install controller-gen into ./bin.
$(CONTROLLER_GEN): | $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Install golangci-lint into ./bin.
$(GOLANGCI_LINT): | $(LOCALBIN)
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

.PHONY: setup-envtest
setup-envtest: $(SETUP_ENVTEST) ## Install setup-envtest and supply kube-apiserver, etcd and kubectl (builds them offline if needed).
	@./hack/setup-envtest.sh >/dev/null

$(SETUP_ENVTEST): | $(LOCALBIN)
	$(call go-install-tool,$(SETUP_ENVTEST),sigs.k8s.io/controller-runtime/tools/setup-envtest,$(SETUP_ENVTEST_VERSION))

# go-install-tool installs a Go tool at a pinned version into ./bin, as name-version with a symlink.
define go-install-tool
@[ -f "$(1)-$(3)" ] && [ "$$(readlink -- "$(1)" 2>/dev/null)" = "$$(realpath -- "$(1)-$(3)")" ] || { \
set -e; \
package=$(2)@$(3) ;\
echo "Downloading $${package}" ;\
rm -f "$(1)" ;\
GOBIN="$(LOCALBIN)" go install $${package} ;\
mv "$(LOCALBIN)/$$(basename "$(1)")" "$(1)-$(3)" ;\
} ;\
ln -sf "$$(realpath -- "$(1)-$(3)")" "$(1)"
endef

##@ Packaging tools (Helm for dist/chart, gotestsum for make test's progress)

HELM ?= $(LOCALBIN)/helm
GOTESTSUM ?= $(LOCALBIN)/gotestsum

HELM_VERSION ?= v3.22.0
GOTESTSUM_VERSION ?= v1.13.0

.PHONY: helm
helm: $(HELM) ## Install helm into ./bin (built from the Go module proxy).
$(HELM): | $(LOCALBIN)
	$(call go-install-tool,$(HELM),helm.sh/helm/v3/cmd/helm,$(HELM_VERSION))

.PHONY: gotestsum
gotestsum: $(GOTESTSUM) ## Install gotestsum into ./bin.
$(GOTESTSUM): | $(LOCALBIN)
	$(call go-install-tool,$(GOTESTSUM),gotest.tools/gotestsum,$(GOTESTSUM_VERSION))

##@ Multi-arch image

# PLATFORMS lists the platforms docker-buildx builds the manager image for.
PLATFORMS ?= linux/arm64,linux/amd64,linux/s390x,linux/ppc64le

.PHONY: docker-buildx
docker-buildx: ## Build and push the manager image for PLATFORMS (docker buildx; the Dockerfile cross-compiles on the build platform).
	- $(CONTAINER_TOOL) buildx create --name kubefence-builder
	$(CONTAINER_TOOL) buildx use kubefence-builder
	- $(CONTAINER_TOOL) buildx build --push --platform=$(PLATFORMS) $(DOCKER_BUILD_ARGS) --tag ${IMG} -f Dockerfile .
	- $(CONTAINER_TOOL) buildx rm kubefence-builder

##@ Install configurations and token history

# DEPLOY_CONFIG is the kustomize directory deploy and undeploy build:
# config/default (self-signed webhook certificates) or config/cert-manager.
DEPLOY_CONFIG ?= config/default
# KEEP_HISTORY=true (the default) makes undeploy keep every object labelled
# kubefence.io/token-history=true: the FencedLease CRD (and so every lease;
# the epoch store's shards live in the leases' namespaces).
# Deleting them makes a reinstalled operator issue tokens from 1 again
# (docs/operations.md#upgrading).
KEEP_HISTORY ?= true
# UNDEPLOY_WAIT=false returns once the deletions are accepted instead of
# waiting for finalizers (a namespace needs kube-controller-manager's
# namespace controller to finish).
UNDEPLOY_WAIT ?= true
UNDEPLOY_SELECTOR = $(if $(filter false,$(KEEP_HISTORY)),,--selector='kubefence.io/token-history!=true')

##@ Helm chart (dist/chart)

.PHONY: chart-sync
chart-sync: manifests ## Copy the generated CRD, the alert rules, the Grafana dashboard and the heartbeat policy into dist/chart/files (test/install fails when they differ).
	mkdir -p dist/chart/files/crds
	cp config/crd/bases/coordination.kubefence.io_fencedleases.yaml dist/chart/files/crds/
	cp config/prometheus/prometheus_rule.yaml dist/chart/files/
	cp config/prometheus/grafana_dashboard.json dist/chart/files/
	cp config/heartbeat/heartbeat_policy.yaml dist/chart/files/

.PHONY: helm-lint
helm-lint: helm ## Lint the Helm chart.
	$(HELM) lint --strict dist/chart

##@ Test progress and other Kubernetes minors

# GOTESTSUM_FORMAT is how make test reports: pkgname-and-test-fails prints each
# package with its duration as it finishes (and the output of failed tests);
# testname prints every test.
GOTESTSUM_FORMAT ?= pkgname-and-test-fails

# The suites that exercise the API server itself (CRD validation and CEL,
# admission webhooks, every way a tenure ends, the controller, the install
# manifests and chart, a rolling upgrade from the previous release); the
# long fault, history and example suites stay on the default version.
K8S_MINOR_PACKAGES ?= ./test/api/... ./test/tenure/... ./test/operator/... ./controllers/... ./pkg/certrotation/... ./test/install/... ./test/upgrade/...

# K8S_MINOR_VERSION is the other Kubernetes version test-k8s-minor runs against.
K8S_MINOR_VERSION ?= 1.36.3

.PHONY: test-k8s-minor
test-k8s-minor: kustomize helm gotestsum $(SETUP_ENVTEST) ## Run the API-server suites against another Kubernetes (K8S_MINOR_VERSION, default 1.36.3; hack/setup-envtest.sh builds it from the module proxy in about 15 min the first time).
	KUBEBUILDER_ASSETS="$$(ENVTEST_K8S_VERSION=$(K8S_MINOR_VERSION) ./hack/setup-envtest.sh | tail -n1)" $(GOTESTSUM) --format $(GOTESTSUM_FORMAT) -- $(K8S_MINOR_PACKAGES) -count=1 -timeout 30m $(TEST_ARGS)
