// kafkajs against a kqlite broker, driven by tests/server/test_kafkajs.py.
//
//   node kafkajs_tool.js COMMAND BOOTSTRAP [ARGS...]
//
// Every result is one JSON object per line on stdout; kafkajs's own log goes to stderr so
// it can never be mistaken for a result. A failure prints {"error": ...} and exits 1.
// KAFKAJS_SECURITY, when set, is JSON for kafkajs's ssl and sasl options: {"ssl": {"ca":
// PATH, "cert": PATH, "key": PATH}, "sasl": {"mechanism": ..., "username": ...,
// "password": ...}}, files read here.
'use strict'

const fs = require('fs')
const readline = require('readline')
const { Kafka, logLevel, ConfigResourceTypes, CompressionTypes } = require('kafkajs')

const [command, bootstrap, ...args] = process.argv.slice(2)

const emit = obj => process.stdout.write(JSON.stringify(obj) + '\n')

const security = JSON.parse(process.env.KAFKAJS_SECURITY || '{}')
if (security.ssl) {
  const files = security.ssl
  security.ssl = { ca: [fs.readFileSync(files.ca, 'utf-8')] }
  if (files.cert) {
    security.ssl.cert = fs.readFileSync(files.cert, 'utf-8')
    security.ssl.key = fs.readFileSync(files.key, 'utf-8')
  }
}

const kafka = new Kafka({
  ...security,
  clientId: 'kqlite-kafkajs-test',
  brokers: [bootstrap],
  logLevel: logLevel.WARN,
  logCreator: () => ({ namespace, label, log }) => {
    process.stderr.write(`${label} [${namespace}] ${JSON.stringify(log)}\n`)
  },
  retry: { retries: 8, initialRetryTime: 100 },
})

// A consumer tuned so that a departure is noticed in seconds, not Kafka's default 30 s.
const groupConsumer = groupId =>
  kafka.consumer({
    groupId,
    sessionTimeout: 10000,
    rebalanceTimeout: 20000,
    heartbeatInterval: 500,
    maxWaitTimeInMs: 200,
  })

const record = (topic, partition, message) => ({
  topic,
  partition,
  offset: Number(message.offset),
  key: message.key && message.key.toString(),
  value: message.value.toString(),
})

const commands = {
  // create, list, describe, fetch offsets (after producing COUNT records), delete
  async admin(topic, partitions, count) {
    const admin = kafka.admin()
    await admin.connect()
    try {
      const created = await admin.createTopics({
        topics: [{ topic, numPartitions: Number(partitions) }],
        waitForLeaders: true,
      })
      emit({ step: 'create', created })
      const again = await admin.createTopics({ topics: [{ topic, numPartitions: 1 }] })
      emit({ step: 'create-again', created: again })
      emit({ step: 'list', topics: await admin.listTopics() })
      const { topics } = await admin.fetchTopicMetadata({ topics: [topic] })
      emit({
        step: 'describe',
        topics: topics.map(t => ({
          name: t.name,
          partitions: t.partitions
            .map(p => ({ id: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr,
              error: p.partitionErrorCode }))
            .sort((a, b) => a.id - b.id),
        })),
      })
      const producer = kafka.producer()
      await producer.connect()
      const messages = []
      for (let i = 0; i < Number(count); i++) {
        messages.push({ key: `k${i}`, value: `v${i}`, partition: i % Number(partitions) })
      }
      await producer.send({ topic, messages })
      await producer.disconnect()
      const offsets = await admin.fetchTopicOffsets(topic)
      emit({
        step: 'offsets',
        offsets: offsets
          .map(o => ({ partition: o.partition, low: Number(o.low), high: Number(o.high),
            offset: Number(o.offset) }))
          .sort((a, b) => a.partition - b.partition),
      })
      await admin.deleteTopics({ topics: [topic], timeout: 10000 })
      emit({ step: 'delete' })
      emit({ step: 'list-after-delete', topics: await admin.listTopics() })
    } finally {
      await admin.disconnect()
    }
  },

  // The admin calls tools make beyond topics: configs, partitions, offsets by time,
  // record deletion, a group's offsets set, listed, described and deleted, the cluster
  async 'admin-tools'(topic, groupId, baseTimestamp) {
    const admin = kafka.admin()
    await admin.connect()
    const base = Number(baseTimestamp)
    const topicConfig = async () => {
      const { resources } = await admin.describeConfigs({
        resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
          configNames: ['retention.ms', 'cleanup.policy'] }],
        includeSynonyms: false,
      })
      return Object.fromEntries(resources[0].configEntries.map(e => [e.configName, e.configValue]))
    }
    try {
      await admin.createTopics({
        topics: [{ topic, numPartitions: 2,
          configEntries: [{ name: 'retention.ms', value: '3600000' }] }],
        waitForLeaders: true,
      })
      emit({ step: 'configs', configs: await topicConfig() })
      await admin.alterConfigs({
        validateOnly: false,
        resources: [{ type: ConfigResourceTypes.TOPIC, name: topic,
          configEntries: [{ name: 'retention.ms', value: '7200000' }] }],
      })
      emit({ step: 'configs-altered', configs: await topicConfig() })

      await admin.createPartitions({ topicPartitions: [{ topic, count: 4 }] })
      const { topics } = await admin.fetchTopicMetadata({ topics: [topic] })
      emit({ step: 'partitions', count: topics[0].partitions.length })

      const producer = kafka.producer()
      await producer.connect()
      const messages = []
      for (let p = 0; p < 4; p++) {
        for (let i = 0; i < 10; i++) {
          messages.push({ partition: p, value: `p${p}-${i}`, timestamp: String(base + i * 1000) })
        }
      }
      await producer.send({ topic, acks: -1, messages })
      await producer.disconnect()
      const byTime = await admin.fetchTopicOffsetsByTimestamp(topic, base + 5000)
      emit({ step: 'offsets-by-time',
        offsets: byTime.map(o => ({ partition: o.partition, offset: Number(o.offset) }))
          .sort((a, b) => a.partition - b.partition) })

      await admin.deleteTopicRecords({ topic, partitions: [{ partition: 0, offset: '3' }] })
      const after = await admin.fetchTopicOffsets(topic)
      emit({ step: 'records-deleted',
        low: after.map(o => ({ partition: o.partition, low: Number(o.low) }))
          .sort((a, b) => a.partition - b.partition) })

      await admin.setOffsets({ groupId, topic,
        partitions: [0, 1, 2, 3].map(p => ({ partition: p, offset: String(5 + p) })) })
      const offsets = async () => {
        const [{ partitions }] = await admin.fetchOffsets({ groupId, topics: [topic] })
        return partitions.map(p => ({ partition: p.partition, offset: Number(p.offset) }))
          .sort((a, b) => a.partition - b.partition)
      }
      emit({ step: 'group-offsets', offsets: await offsets() })
      const listed = async () => (await admin.listGroups()).groups.map(g => g.groupId)
      emit({ step: 'groups', groups: await listed() })
      const { groups } = await admin.describeGroups([groupId])
      emit({ step: 'describe-group', groups: groups.map(g => ({ groupId: g.groupId,
        state: g.state, members: g.members.length, errorCode: g.errorCode })) })
      const deleted = await admin.deleteGroups([groupId])
      emit({ step: 'delete-group', results: deleted.map(r => ({ groupId: r.groupId,
        errorCode: r.errorCode })) })
      emit({ step: 'groups-after-delete', groups: await listed() })
      emit({ step: 'group-offsets-after-delete', offsets: await offsets() })

      const cluster = await admin.describeCluster()
      emit({ step: 'cluster', controller: cluster.controller,
        brokers: cluster.brokers.map(b => ({ nodeId: b.nodeId, port: b.port })) })
      await admin.deleteTopics({ topics: [topic], timeout: 10000 })
    } finally {
      await admin.disconnect()
    }
  },

  // COUNT records through an idempotent producer, in sends of 1 to 5 records (so batches
  // carry base sequences other than 0 and 1); prints each send's values and metadata
  async 'produce-idempotent'(topic, count, codec) {
    const producer = kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      // kafkajs warns that bounded retries may break exactly-once; the default is unbounded
      retry: { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 100, maxRetryTime: 2000 },
    })
    await producer.connect()
    try {
      let i = 0
      for (let size = 1; i < Number(count); size = size % 5 + 1) {
        const values = []
        for (; values.length < size && i < Number(count); i++) values.push(`idem-${i}`)
        const metadata = await producer.send({
          topic,
          acks: -1,
          compression: codec === 'gzip' ? CompressionTypes.GZIP : CompressionTypes.None,
          messages: values.map((value, j) => ({ key: `k${(i + j) % 7}`, value })),
        })
        emit({
          values,
          metadata: metadata.map(m => ({ partition: m.partition, offset: Number(m.baseOffset),
            error: m.errorCode })),
        })
      }
    } finally {
      await producer.disconnect()
    }
  },

  async create(topic, partitions) {
    const admin = kafka.admin()
    await admin.connect()
    try {
      const created = await admin.createTopics({
        topics: [{ topic, numPartitions: Number(partitions) }],
        waitForLeaders: true,
      })
      emit({ created })
    } finally {
      await admin.disconnect()
    }
  },

  // COUNT records with values PREFIX-0..COUNT-1, spread by key, in batches of 50
  async produce(topic, prefix, count) {
    const producer = kafka.producer()
    await producer.connect()
    try {
      for (let start = 0; start < Number(count); start += 50) {
        const messages = []
        for (let i = start; i < Math.min(start + 50, Number(count)); i++) {
          messages.push({ key: `k${i}`, value: `${prefix}-${i}` })
        }
        await producer.send({ topic, acks: -1, messages })
      }
      emit({ produced: Number(count) })
    } finally {
      await producer.disconnect()
    }
  },

  // A group member: prints every assignment and record until stdin closes, then leaves
  async member(topic, groupId) {
    const consumer = groupConsumer(groupId)
    consumer.on(consumer.events.GROUP_JOIN, e => {
      emit({ event: 'join', memberId: e.payload.memberId,
        assignment: e.payload.memberAssignment[topic] || [] })
    })
    consumer.on(consumer.events.CRASH, e => {
      emit({ event: 'crash', error: String(e.payload.error) })
    })
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    await consumer.run({ eachMessage: async ({ topic, partition, message }) => {
      emit({ event: 'record', ...record(topic, partition, message) })
    } })
    const stdin = readline.createInterface({ input: process.stdin })
    await new Promise(resolve => stdin.on('close', resolve))
    await consumer.disconnect()
    emit({ event: 'left' })
  },

  // Reads until COUNT records arrived, committing each one's next offset, then leaves
  async 'consume-commit'(topic, groupId, count) {
    const consumer = groupConsumer(groupId)
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    let done
    const finished = new Promise(resolve => { done = resolve })
    let seen = 0
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        if (seen >= Number(count)) return
        emit(record(topic, partition, message))
        await consumer.commitOffsets([
          { topic, partition, offset: String(Number(message.offset) + 1) },
        ])
        if (++seen === Number(count)) done()
      },
    })
    await finished
    await consumer.disconnect()
  },

  async 'topic-offsets'(topic) {
    const admin = kafka.admin()
    await admin.connect()
    try {
      const offsets = await admin.fetchTopicOffsets(topic)
      emit({
        offsets: offsets
          .map(o => ({ partition: o.partition, low: Number(o.low), high: Number(o.high) }))
          .sort((a, b) => a.partition - b.partition),
      })
    } finally {
      await admin.disconnect()
    }
  },

  // Commits OFFSET for every partition of TOPIC in GROUP (which has no members)
  async 'set-offsets'(topic, groupId, offset) {
    const admin = kafka.admin()
    await admin.connect()
    try {
      const partitions = (await admin.fetchTopicOffsets(topic)).map(o => ({
        partition: o.partition, offset: String(offset) }))
      await admin.setOffsets({ groupId, topic, partitions })
      emit({ set: partitions.length })
    } finally {
      await admin.disconnect()
    }
  },

  // Deletes the records below OFFSET in every partition of TOPIC
  async 'delete-records'(topic, offset) {
    const admin = kafka.admin()
    await admin.connect()
    try {
      const partitions = (await admin.fetchTopicOffsets(topic)).map(o => ({
        partition: o.partition, offset: String(offset) }))
      await admin.deleteTopicRecords({ topic, partitions })
      emit({ deleted: partitions.length })
    } finally {
      await admin.disconnect()
    }
  },

  // Produce COUNT records to TOPIC, then read them back as a member of GROUP
  async roundtrip(topic, groupId, count) {
    const producer = kafka.producer()
    await producer.connect()
    const values = Array.from({ length: Number(count) }, (_, i) => `r${i}`)
    await producer.send({ topic, messages: values.map(value => ({ value })) })
    await producer.disconnect()
    const consumer = groupConsumer(groupId)
    await consumer.connect()
    await consumer.subscribe({ topic, fromBeginning: true })
    const seen = new Set()
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`read ${seen.size} of ${count}`)), 40000)
      consumer.run({
        eachMessage: async ({ message }) => {
          seen.add(message.value.toString())
          if (seen.size >= values.length) {
            clearTimeout(timer)
            resolve()
          }
        },
      })
    })
    await consumer.disconnect()
    emit({ read: seen.size })
  },

  // The group's committed offsets for TOPIC, as the coordinator returns them
  async 'group-offsets'(topic, groupId) {
    const admin = kafka.admin()
    await admin.connect()
    try {
      const [{ partitions }] = await admin.fetchOffsets({ groupId, topics: [topic] })
      emit({
        offsets: partitions
          .map(p => ({ partition: p.partition, offset: Number(p.offset) }))
          .sort((a, b) => a.partition - b.partition),
      })
    } finally {
      await admin.disconnect()
    }
  },
}

if (!commands[command]) {
  process.stderr.write(`unknown command ${command}; one of ${Object.keys(commands).join(', ')}\n`)
  process.exit(2)
}
commands[command](...args).then(
  () => process.exit(0),
  err => {
    emit({ error: `${err.name}: ${err.message}`, type: err.type, stack: err.stack })
    process.exit(1)
  },
)
