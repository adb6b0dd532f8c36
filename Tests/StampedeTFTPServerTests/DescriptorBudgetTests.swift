import StampedeTFTPServer
import Testing

/// How the open-file limit is shared out (`DescriptorBudget`): whatever the flags, what may be
/// open at once fits in the limit.
@Suite struct DescriptorBudgetSpec {
    /// Everything counted at its most: every connection streaming a file, every image a memfd,
    /// every own-socket transfer (which, for TFTP, the reserve covers a streamed file of).
    func most(_ budget: DescriptorBudget) -> Int {
        budget.reserve + budget.images + budget.httpConnections * DescriptorBudget.perConnection + budget.transferSockets
    }

    @Test func tftpAloneKeepsWhatItHadTransferSocketsBeyondTheReserve() {
        let budget = DescriptorBudget(limit: 65536, imageBytes: 1 << 30, smallestImage: nil, httpConnections: nil,
                                      transferSockets: nil)
        #expect(budget.reserve == 1024 && budget.images == 0 && budget.httpConnections == 0)
        #expect(budget.transferSockets == 64512)
        // A small limit: half of it for transfers, as before HTTP existed.
        #expect(DescriptorBudget(limit: 64, imageBytes: 1 << 30, smallestImage: nil, httpConnections: nil,
                                 transferSockets: nil).transferSockets == 32)
    }

    @Test func withHTTPEveryConnectionCountsTwoAndEveryImageOne() {
        for limit in [64, 300, 1024, 20000, 65536, 1 << 20] {
            let budget = DescriptorBudget(limit: limit, imageBytes: 1 << 30, smallestImage: 64 << 10, httpConnections: nil,
                                          transferSockets: nil)
            #expect(most(budget) <= limit, "\(limit): \(budget)")
            #expect(budget.httpConnections > 0 && budget.transferSockets > 0 && budget.warnings.isEmpty, "\(limit)")
        }
        let large = DescriptorBudget(limit: 1 << 20, imageBytes: 1 << 30, smallestImage: 64 << 10, httpConnections: nil,
                                     transferSockets: nil)
        #expect(large.httpConnections == DescriptorBudget.defaultConnections)
        #expect(large.images == (1 << 30) / (64 << 10))  // the cache's budget in the smallest memfds
    }

    @Test func aConnectionLimitTheDescriptorsCannotHoldIsClampedAndSaid() {
        let budget = DescriptorBudget(limit: 600, imageBytes: 1 << 30, smallestImage: 64 << 10, httpConnections: 5000,
                                      transferSockets: nil)
        #expect(budget.httpConnections < 300 && most(budget) <= 600)
        #expect(budget.warnings.count == 1)
        #expect(budget.warnings.first?.contains("serving at most \(budget.httpConnections)") == true)
        // One the limit holds is taken as asked, and the TFTP reads have the rest.
        let held = DescriptorBudget(limit: 600, imageBytes: 1 << 30, smallestImage: 64 << 10, httpConnections: 100,
                                    transferSockets: nil)
        #expect(held.httpConnections == 100 && held.warnings.isEmpty && most(held) <= 600)
    }

    @Test func transferSocketsAskedForAreTakenAsAsked() {
        let budget = DescriptorBudget(limit: 4096, imageBytes: 1 << 30, smallestImage: nil, httpConnections: nil,
                                      transferSockets: 0)
        #expect(budget.transferSockets == 0)
    }
}
