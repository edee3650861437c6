// How refused bodies are described: an absent field once, as required; a field of the wrong type
// once, by its type; a wrong one of the right type by the rules it breaks.
import { ArgumentMetadata } from '@nestjs/common';
import { Type } from 'class-transformer';
import { getMetadataStorage, IsInt, IsOptional, IsString, Max, Min } from 'class-validator';
import { CreateProductDto } from '../admin/dto/create-product.dto';
import { RebalanceDto } from '../admin/dto/rebalance.dto';
import { RestockDto } from '../admin/dto/restock.dto';
import { UpdateProductDto } from '../admin/dto/update-product.dto';
import { CreateOrderDto } from '../orders/dto/create-order.dto';
import { ValidationFailedError } from './domain-errors';
import { validationPipe } from './validation.pipe';

class Order {
  @IsString() userId: string;
  @Type(() => Number) @IsInt() @Min(1) @Max(2_147_483_647) productId: number;
  @IsOptional() @IsInt() @Min(1) quantity?: number;
}

const meta: ArgumentMetadata = { type: 'body', metatype: Order };

async function refusal(body: unknown, metadata = meta): Promise<string> {
  try {
    await validationPipe().transform(body, metadata);
  } catch (err) {
    if (err instanceof ValidationFailedError) return err.message;
    throw err;
  }
  throw new Error('accepted');
}

describe('validationPipe', () => {
  it('should say a missing field is required, once', async () => {
    expect(await refusal({ userId: 'alice' })).toBe('productId is required');
    expect(await refusal({})).toBe('userId is required; productId is required');
  });

  it('should list the rules a present but wrong field breaks, without its value', async () => {
    const message = await refusal({ userId: 'alice', productId: 0, quantity: 'secret-ish' });
    expect(message).toMatch(/productId must not be less than 1/);
    expect(message).toMatch(/quantity/);
    expect(message).not.toContain('secret-ish');
  });

  it('should say once that a string where a number goes must be a number, without its range', async () => {
    expect(await refusal({ userId: 'alice', productId: 3, quantity: 'two' })).toBe('quantity must be a number');
    expect(await refusal({ userId: 7, productId: 3 })).toBe('userId must be a string');
    expect(await refusal({ userId: 'alice', productId: 3, quantity: 1.5 })).toBe('quantity must be an integer number');
  });

  it('should not call an optional field missing', async () => {
    await expect(validationPipe().transform({ userId: 'alice', productId: 3 }, meta)).resolves.toMatchObject({
      productId: 3,
    });
  });
});

describe('validationPipe on the admin and order bodies', () => {
  /** A valid body of each, and its fields that take a number (every field with an integer rule). */
  const bodies: Array<[string, new () => object, Record<string, unknown>]> = [
    ['CreateProductDto', CreateProductDto, { name: 'Sneaker', stock: 10, segments: 2 }],
    ['UpdateProductDto', UpdateProductDto, {}],
    ['RestockDto', RestockDto, { units: 5 }],
    ['RebalanceDto', RebalanceDto, {}],
    ['CreateOrderDto', CreateOrderDto, { userId: 'alice', productId: 3 }],
  ];
  const numeric = (dto: new () => object) =>
    [
      ...new Set(
        getMetadataStorage()
          .getTargetValidationMetadatas(dto, '', true, false)
          .filter((m) => m.name === 'isInt')
          .map((m) => m.propertyName),
      ),
    ].sort();

  it('should find the numeric fields it checks', () => {
    expect(Object.fromEntries(bodies.map(([name, dto]) => [name, numeric(dto)]))).toEqual({
      CreateProductDto: ['admissionTtlS', 'limitPerUser', 'paymentTimeoutS', 'segments', 'stock'],
      UpdateProductDto: ['admissionTtlS', 'limitPerUser', 'paymentTimeoutS'],
      RestockDto: ['units'],
      RebalanceDto: ['segments'],
      CreateOrderDto: ['productId', 'quantity'],
    });
  });

  it.each(bodies)(
    'should answer a string in any numeric field of %s with one message naming the field and its type',
    async (_name, dto, valid) => {
      const metadata: ArgumentMetadata = { type: 'body', metatype: dto };
      await expect(validationPipe().transform(valid, metadata)).resolves.toBeInstanceOf(dto);
      for (const field of numeric(dto))
        for (const wrong of ['abc', '12', true, [1], {}])
          expect({ field, wrong, message: await refusal({ ...valid, [field]: wrong }, metadata) }).toEqual({
            field,
            wrong,
            message: `${field} must be a number`,
          });
    },
  );

  it('should still name the range of a number out of it', async () => {
    const metadata: ArgumentMetadata = { type: 'body', metatype: CreateProductDto };
    expect(await refusal({ name: 'Sneaker', stock: -1, segments: 2 }, metadata)).toBe('stock must not be less than 0');
  });
});
