// KafkaJS 2.2.4 going on after the coordinator aborted its transaction with an epoch
// bump (transactionTimeout 1 s), for tests/differential/test_aborted_with_bump.py:
// one STEP line per call the application makes (kafkajs_check.js' format), then DONE.
//
//   node aborted_with_bump.js BOOTSTRAP TOPIC TRANSACTIONAL_ID
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, transactionalId] = process.argv.slice(2)
const kafka = new Kafka({
  clientId: 'txbroker-kafkajs-bump',
  brokers: [bootstrap],
  logLevel: logLevel.NOTHING,
  retry: { retries: 3, initialRetryTime: 100 },
})

async function step(name, fn) {
  try {
    await fn()
    console.log(`STEP ${name} OK null`)
  } catch (e) {
    console.log(`STEP ${name} FAIL ${e.name}: ${e.type || ''} | ${e.message}`)
  }
}

// The test tells us (a line on stdin) once the coordinator wrote its ABORT.
function line() {
  return new Promise(resolve => process.stdin.once('data', resolve))
}

async function main() {
  const producer = kafka.producer({
    transactionalId, maxInFlightRequests: 1, idempotent: true, transactionTimeout: 1000,
  })
  await producer.connect()
  let txn = await producer.transaction()
  await txn.send({ topic, messages: [{ value: 'c0', partition: 0 }, { value: 'c1', partition: 1 }] })
  await txn.commit()
  txn = await producer.transaction()
  await txn.send({ topic, messages: [{ value: 'doomed', partition: 0 }] })
  console.log('SENT')
  await line()
  await step('sends', () => txn.send({
    topic, messages: [{ value: 'late-a', partition: 0 }, { value: 'late-b', partition: 1 }],
  }))
  await step('commit', () => txn.commit())
  await step('abort', () => txn.abort())
  await step('next_transaction', async () => {
    const next = await producer.transaction()
    await next.send({ topic, messages: [{ value: 'again', partition: 0 }] })
    await next.commit()
  })
  await producer.disconnect().catch(() => {})
  console.log('DONE')
  process.exit(0)
}

main().catch(e => { console.log(`STEP setup FAIL ${e.name}: ${e.message}`); console.log('DONE'); process.exit(0) })
