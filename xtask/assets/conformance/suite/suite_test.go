// Package nodeconformance is the e2e test binary of `cargo xtask conformance`: it links
// only the spec packages test/e2e/common/{node,storage,network} (the [NodeConformance]
// selection) and test/e2e/network (sig-network's [Conformance] specs) of the pinned
// release, whose specs run unmodified, with the e2e framework's own flags and reporting. The full test/e2e binary
// links every other suite and the cloud providers besides, which makes a cold build much
// longer; the specs it would run here are the same.
// Copied by xtask/assets/conformance/build.sh into the cache's Go module.
package nodeconformance

import (
	"flag"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"

	// The specs.
	_ "k8s.io/kubernetes/test/e2e/common/node"
	_ "k8s.io/kubernetes/test/e2e/common/storage"
	_ "k8s.io/kubernetes/test/e2e/common/network"
	_ "k8s.io/kubernetes/test/e2e/network"

	// The framework's debug and node hooks, as the full binary links them.
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"
)

func TestMain(m *testing.M) {
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	flag.Parse()
	framework.AfterReadingAllFlags(&framework.TestContext)
	if framework.TestContext.RepoRoot != "" {
		testfiles.AddFileSource(testfiles.RootFileSource{Root: framework.TestContext.RepoRoot})
	}
	os.Exit(m.Run())
}

func TestNodeConformance(t *testing.T) {
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Verge conformance (common/node, common/storage, common/network, network)", suiteConfig, reporterConfig)
}
