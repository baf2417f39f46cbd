// Package suite is the e2e test binary of `cargo xtask conformance`: it links the spec
// packages KubeEdge's own conformance binary compiles in, test/e2e/{apps,auth,common,node,
// scheduling,storage}, plus sig-network's test/e2e/network, of the pinned release, whose
// specs run unmodified, with the e2e framework's own flags and reporting. The full
// test/e2e binary links every other suite (kubectl, apimachinery, dra, windows, ...)
// besides, which makes a cold build longer; the specs selected here are the same.
// Copied by xtask/assets/conformance/build.sh into the cache's Go module.
package suite

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
	_ "k8s.io/kubernetes/test/e2e/apps"
	_ "k8s.io/kubernetes/test/e2e/auth"
	_ "k8s.io/kubernetes/test/e2e/common"
	_ "k8s.io/kubernetes/test/e2e/network"
	_ "k8s.io/kubernetes/test/e2e/node"
	_ "k8s.io/kubernetes/test/e2e/scheduling"
	_ "k8s.io/kubernetes/test/e2e/storage"

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

func TestConformance(t *testing.T) {
	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Verge conformance (apps, auth, common, network, node, scheduling, storage)", suiteConfig, reporterConfig)
}
